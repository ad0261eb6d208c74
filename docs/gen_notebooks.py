"""Execute the notebooks the site renders and write them, with their outputs, under docs/tutorials/.

    python docs/gen_notebooks.py          # runs notebooks/selection_sweep.ipynb (a minute or two, CPU)

The notebooks under ``notebooks/`` are the sources: committed without outputs and executed by
``tests/test_notebooks.py``. The site shows the copies under ``docs/tutorials/`` that this script
executed with the notebook's own parameters (the tiny random test model), with a first cell that
says when, at which commit and on which CPU. ``tests/test_docs.py`` checks that each copy's code
is its source's, and ``tests/test_notebooks.py`` runs each source again and checks that the copy's
outputs are what the current code prints, so an edited notebook or a change in what it computes
needs this script run again. Each notebook runs in an empty temporary folder (as a reader's
download would), which is deleted with the runs' directories.
"""

from __future__ import annotations

import datetime
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RENDERED = {"selection_sweep.ipynb": "tutorials/selection-sweep.ipynb"}
"""Source notebook (under notebooks/) -> the executed copy (under docs/)."""


def cpu_model() -> str:
    """The CPU model name from ``lscpu`` (``platform.processor()`` when lscpu is missing)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown CPU"
    return next(
        (line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "unknown CPU"
    )


def provenance() -> str:
    """One Markdown paragraph: the date, commit and CPU of this execution."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "notebooks", "evolora", "operators"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    where = f"commit {commit.strip() or 'unknown'}{' with local changes' if dirty else ''}"
    return (
        f"*Executed by `python docs/gen_notebooks.py` on {date}, {where}, on {cpu_model()}, with the "
        f"parameters below (the tiny random test model): the numbers show what the notebook computes, "
        f"not a finding. Warnings printed to stderr are left out. The source is `notebooks/{{name}}`.*"
    )


def execute(source: Path, target: Path) -> None:
    """Run ``source`` top to bottom (an empty temporary folder as the working directory, ``OUT``
    inside it) and write it, outputs included (stderr streams apart: library warnings), to ``target``."""
    import nbclient
    import nbformat

    notebook = nbformat.read(source, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    with tempfile.TemporaryDirectory() as scratch:
        injected = nbformat.v4.new_code_cell(f"OUT = {json.dumps(str(Path(scratch) / 'run'))}")
        position = notebook.cells.index(code[0]) + 1
        notebook.cells.insert(position, injected)
        nbclient.NotebookClient(
            notebook, timeout=1800, kernel_name="python3", resources={"metadata": {"path": scratch}}
        ).execute()
        notebook.cells.pop(position)
    for number, cell in enumerate((c for c in notebook.cells if c.cell_type == "code"), 1):
        cell.execution_count = number  # as a reader running it top to bottom would see
        cell.outputs = [o for o in cell.outputs if o.get("name") != "stderr"]  # library warnings
        for output in cell.outputs:
            if "execution_count" in output:
                output["execution_count"] = number
    note = nbformat.v4.new_markdown_cell(provenance().replace("{name}", source.name))
    notebook.cells.insert(1, note)
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, target)


def text_outputs(notebook) -> list[list[str]]:
    """Per code cell, what it shows as text (streams and ``text/plain`` results; images and the
    wall-clock-dependent provenance left out): what a fresh run must reproduce."""
    shown = []
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        texts = []
        for output in cell.outputs:
            if output.get("output_type") == "stream" and output.get("name") == "stdout":
                texts.append(output["text"])
            elif "text/plain" in output.get("data", {}) and "image/png" not in output["data"]:
                texts.append(output["data"]["text/plain"])
        shown.append(texts)
    return shown


def main() -> None:
    for name, relative in RENDERED.items():
        execute(ROOT / "notebooks" / name, ROOT / "docs" / relative)
        print(f"wrote docs/{relative}")


if __name__ == "__main__":
    sys.exit(main())
