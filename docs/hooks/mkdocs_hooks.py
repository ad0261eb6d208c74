"""MkDocs hooks of the site: math as MathML at build time, and the package version in the footer.

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


def on_page_content(html: str, **kwargs) -> str:
    return to_mathml(html)


def on_config(config, **kwargs):
    """The footer names the version of the package the site documents (``evolora.__version__``)."""
    sys.path.insert(0, str(Path(config["config_file_path"]).resolve().parent))
    from evolora import __version__

    config["copyright"] = f"evolora {__version__} (see the changelog)"
    return config
