"""Notebooks run top to bottom in a real Jupyter kernel (nbclient), in an empty folder, papermill-style:
a cell that overrides the parameters is injected after the parameters cell, and any failing cell
fails the test. A notebook the site publishes (``docs/gen_notebooks.py``) is run with its own
parameters instead, and the published copy must show what this run shows."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
spec = importlib.util.spec_from_file_location("gen_notebooks", ROOT / "docs" / "gen_notebooks.py")
gen_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen_notebooks)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_committed_without_outputs_and_start_with_parameters(path):
    code = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "strip notebook outputs before committing"
    assert "Parameters" in code[0].source, "the first code cell must hold the parameters"
    assert "../" not in "".join(c.source for c in code), "a notebook runs from any folder: name presets, not ../tasks"


def test_the_sweep_notebook_writes_the_tutorials_operator():
    """The notebook's ``my_ops.py`` is the custom-operator tutorial's file, and the sweep names it."""
    page = (ROOT / "docs" / "tutorials" / "custom-operator.md").read_text()
    tutorial = re.search(r'```python title="my_ops.py"\n(.*?)^```', page, re.M | re.S).group(1)
    cells = [
        c.source
        for c in nbformat.read(ROOT / "notebooks" / "selection_sweep.ipynb", as_version=4).cells
        if c.cell_type == "code"
    ]
    assert "%%writefile sweep_ops/my_ops.py\n" + tutorial.rstrip("\n") in cells
    assert any("my_ops:epsilon_greedy" in cell for cell in cells)


def test_the_sweep_notebook_keeps_a_users_own_my_ops(tmp_path):
    """Its operator cells, run in a folder that already holds a ``my_ops.py``, leave that file as it
    was and import the notebook's own copy."""
    notebook = nbformat.read(ROOT / "notebooks" / "selection_sweep.ipynb", as_version=4)
    start = next(i for i, c in enumerate(notebook.cells) if c.cell_type == "code" and "sweep_ops" in c.source)
    notebook.cells = notebook.cells[start : start + 3]  # the folder, the file, the call of epsilon_greedy
    (tmp_path / "my_ops.py").write_text("raise ImportError('the user's own file was imported')\n")
    nbclient.NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    assert (tmp_path / "my_ops.py").read_text().startswith("raise ImportError")
    assert "epsilon_greedy" in (tmp_path / "sweep_ops" / "my_ops.py").read_text()
    assert "tensor([" in notebook.cells[2].outputs[0]["data"]["text/plain"]


@pytest.mark.slow  # over ~5 s each: CI runs them, `-m "not slow"` skips them
@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.name not in gen_notebooks.RENDERED], ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    overrides = {"MODEL": "tiny-random", "STEPS": 2, "OUT": str(tmp_path / "run")}
    injected = nbformat.v4.new_code_cell("\n".join(f"{k} = {json.dumps(v)}" for k, v in overrides.items()))
    notebook.cells.insert(notebook.cells.index(code[0]) + 1, injected)
    client = nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    assert (tmp_path / "run" / "final" / "summary.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(gen_notebooks.RENDERED))
def test_the_published_notebook_shows_what_a_fresh_run_shows(name, tmp_path):
    """Run the source as ``docs/gen_notebooks.py`` does and compare every text output with the copy the
    site publishes: a stale copy fails here (regenerate it with ``python docs/gen_notebooks.py``)."""
    fresh = tmp_path / name
    gen_notebooks.execute(ROOT / "notebooks" / name, fresh)
    published = nbformat.read(ROOT / "docs" / gen_notebooks.RENDERED[name], as_version=4)
    shown = gen_notebooks.text_outputs(nbformat.read(fresh, as_version=4))
    assert any(shown), "the fresh run shows nothing"
    assert gen_notebooks.text_outputs(published) == shown, "run: python docs/gen_notebooks.py (the copy is stale)"
