"""Notebooks run top to bottom on the tiny model (their parameters cell is overridden)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import matplotlib
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path, monkeypatch):
    matplotlib.use("Agg")
    monkeypatch.chdir(path.parent)
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    assert all(not c["outputs"] for c in cells), "strip notebook outputs before committing"
    namespace: dict = {}
    exec("".join(cells[0]["source"]), namespace)  # the parameters cell
    namespace.update(MODEL="tiny-random", STEPS=2, OUT=str(tmp_path / "run"))
    for cell in cells[1:]:
        exec(compile("".join(cell["source"]), f"{path.name}", "exec"), namespace)
    assert (tmp_path / "run" / "final" / "summary.json").exists()
