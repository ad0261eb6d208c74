"""MkDocs hooks of the site: math as MathML at build time, config keys that break only at dots, a
notebook page that loads nothing from outside the site, and the package version in the footer.

Math: ``pymdownx.arithmatex`` (generic mode) marks ``$$...$$`` and ``$...$`` as
``<div class="arithmatex">\\[...\\]</div>`` / ``<span class="arithmatex">\\(...\\)</span>``; this hook
converts each to MathML with latex2mathml, which browsers render natively: no script, no font
download, nothing from outside the site.
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

from latex2mathml.converter import convert

MATH = re.compile(r'<(div|span) class="arithmatex">\s*\\([\[(])(.*?)\\[\])]\s*</\1>', flags=re.DOTALL)


def to_mathml(page_html: str) -> str:
    """``page_html`` with every arithmatex block replaced by MathML (block or inline).

    Raises:
        ValueError: a formula latex2mathml cannot parse (the build stops, naming it).
    """

    def replace(match: re.Match) -> str:
        latex = html.unescape(match.group(3)).strip()
        display = "block" if match.group(2) == "[" else "inline"
        try:
            return convert(latex, display=display)
        except Exception as error:
            raise ValueError(f"cannot convert the formula {latex!r} to MathML: {error}") from error

    return MATH.sub(replace, page_html)


CONFIG_PAGE = "reference/config.md"
KEY_CELL = re.compile(r"(<tr>\s*<td>)<code>([^<]*)</code>")


def break_keys_at_dots(page_html: str) -> str:
    """The configuration reference's tables go inside ``<div class="config-keys">`` (stylesheets/extra.css:
    no break inside a word; a class on the table itself would lose material's table style), and each
    row's key gets a ``<wbr>`` after every dot, its only break points."""
    page_html = page_html.replace("<table>", '<div class="config-keys"><table>').replace("</table>", "</table></div>")
    return KEY_CELL.sub(lambda m: m.group(1) + "<code>" + m.group(2).replace(".", ".<wbr>") + "</code>", page_html)


REMOTE_SCRIPTS = re.compile(
    r'<script src="">\s*</script>|<script type="module">(?:(?!</script>).)*?'
    r"https://cdnjs\.cloudflare\.com(?:(?!</script>).)*</script>",
    flags=re.DOTALL,
)
"""mkdocs-jupyter's empty MathJax loader and its Mermaid loader (an import from a CDN when a notebook
has a diagram; ours have none): the site's pages load nothing from outside it."""


def on_page_content(html: str, page, **kwargs) -> str:
    html = to_mathml(html)
    if page.file.src_uri == CONFIG_PAGE:
        html = break_keys_at_dots(html)
    return html


def on_post_page(output: str, page, **kwargs) -> str:
    """A notebook page without the scripts of :data:`REMOTE_SCRIPTS`."""
    if page.file.src_uri.endswith(".ipynb"):
        output = REMOTE_SCRIPTS.sub("", output)
    return output


def on_config(config, **kwargs):
    """The footer names the version of the package the site documents (``evolora.__version__``)."""
    sys.path.insert(0, str(Path(config["config_file_path"]).resolve().parent))
    from evolora import __version__

    config["copyright"] = f"evolora {__version__} (see the changelog)"
    return config
