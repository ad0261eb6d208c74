"""Every Python example of the README and the tutorials runs as written: each block on its own,
in a temporary directory holding a copy of ``tasks/``, on the tiny random model."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from evolora.operators import REGISTRY

pytestmark = pytest.mark.slow  # over ~5 s each: CI runs them, `-m "not slow"` skips them

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs" / "tutorials").glob("*.md"))]

torch.set_num_threads(1)


def blocks(language: str) -> list[tuple[str, str]]:
    """(page name, code) of every ``language`` block of the README and the tutorials."""
    return [(doc.name, code) for doc in DOCS for code in re.findall(rf"```{language}\n(.*?)```", doc.read_text(), flags=re.S)]


@pytest.fixture
def clean_registry():
    """Undo the examples' registrations, so the registry is as before (names are global)."""
    saved = {kind: dict(specs) for kind, specs in REGISTRY._specs.items()}
    yield
    REGISTRY._specs.clear()
    REGISTRY._specs.update(saved)


def test_the_tutorials_have_deap_and_evotorch_examples():
    code = [block for _, block in blocks("python")]
    assert any("algorithms.eaSimple" in block for block in code)
    assert any("SNES" in block for block in code)


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_example_runs(index, tmp_path, monkeypatch, clean_registry):
    page, code = blocks("python")[index]
    if "evotorch" in code:
        pytest.importorskip("evotorch", reason="optional extra: pip install 'evolora[evotorch]'")
    shutil.copytree(ROOT / "tasks", tmp_path / "tasks")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    exec(compile(code, f"{page}[python {index}]", "exec"), namespace)
    saved = [p for p in ("runs/deap/best", "runs/snes/best") if (tmp_path / p / "adapter_config.json").exists()]
    if "save_" in code:
        assert saved, "the example should write a PEFT adapter directory"


def test_yaml_examples_parse():
    for _, block in blocks("yaml"):
        data = yaml.safe_load(block)
        assert isinstance(data, dict)


def test_the_readme_strategy_runs_and_its_numbers_are_real(tmp_path, monkeypatch):
    """The README's Python block trains for the steps it asks for and evaluates the base."""
    page, code = blocks("python")[0]
    assert page == "README.md"
    shutil.copytree(ROOT / "tasks", tmp_path / "tasks")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "README[python 0]", "exec"), namespace)
    summary = namespace["summary"]
    assert summary["steps"] == 2 and summary["held_out"]["base"]["total"] == 4
    assert (tmp_path / "runs" / "readme-demo" / "final" / "summary.json").exists()
