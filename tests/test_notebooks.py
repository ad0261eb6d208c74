"""Notebooks run top to bottom in a real Jupyter kernel (nbclient), papermill-style: a cell that
overrides the parameters is injected after the parameters cell, and any failing cell fails the test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # over ~5 s each: CI runs them, `-m "not slow"` skips them

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "strip notebook outputs before committing"
    assert "Parameters" in code[0].source, "the first code cell must hold the parameters"
    overrides = {"MODEL": "tiny-random", "STEPS": 2, "OUT": str(tmp_path / "run")}
    injected = nbformat.v4.new_code_cell("\n".join(f"{k} = {json.dumps(v)}" for k, v in overrides.items()))
    notebook.cells.insert(notebook.cells.index(code[0]) + 1, injected)
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    assert (tmp_path / "run" / "final" / "summary.json").exists()
