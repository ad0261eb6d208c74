"""The "Compose your own strategy" examples run as written (each python block on its own, in a temp dir)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml

from evolora.operators import REGISTRY

DOC = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Compose your own strategy"

torch.set_num_threads(1)


def blocks(language: str) -> list[str]:
    """Code blocks of ``language`` in the section (up to the next '## ' heading)."""
    text = DOC.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start: end if end != -1 else len(text)]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


@pytest.fixture
def clean_registry():
    """Undo the examples' registrations, so the registry is as before (names are global)."""
    saved = {kind: dict(specs) for kind, specs in REGISTRY._specs.items()}
    yield
    REGISTRY._specs.clear()
    REGISTRY._specs.update(saved)


def test_section_has_deap_and_evotorch_examples():
    code = blocks("python")
    assert any("algorithms.eaSimple" in block for block in code)
    assert any("SNES" in block for block in code)


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_example_runs(index, tmp_path, monkeypatch, clean_registry):
    if "evotorch" in blocks("python")[index]:
        pytest.importorskip("evotorch", reason="optional extra: pip install 'evolora[evotorch]'")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    exec(compile(blocks("python")[index], f"{DOC.name}[python {index}]", "exec"), namespace)
    saved = [p for p in ("runs/deap/best", "runs/snes/best") if (tmp_path / p / "adapter_config.json").exists()]
    if "save_" in blocks("python")[index]:
        assert saved, "the example should write a PEFT adapter directory"


def test_yaml_examples_parse():
    for block in blocks("yaml"):
        data = yaml.safe_load(block)
        assert isinstance(data, dict) and "evolution" in data


def test_python_api_example_runs(tmp_path, monkeypatch):
    """The README's "Python API" block runs as written (from a temp dir holding tasks/)."""
    text = DOC.read_text()
    start = text.index("## Python API")
    code = re.findall(r"```python\n(.*?)```", text[start: text.find("\n## ", start + 5)], flags=re.S)[0]
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "gsm.yaml").write_text((DOC.parent / "tasks" / "gsm.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "README[Python API]", "exec"), namespace)
    assert namespace["summary"]["steps"] == 3
    assert (tmp_path / "runs" / "api-demo" / "final" / "summary.json").exists()
