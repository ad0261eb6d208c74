"""The lint and format of the whole tree (``ruff check``, rules in ``pyproject.toml`` ``[tool.ruff.lint]``, and ``ruff format``):
undefined names, unused imports, mutable default arguments and the like fail the test run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff is not None, "ruff is in the dev extra: pip install -e '.[dev]'"
    done = subprocess.run(
        [ruff, "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-1000:]


def test_ruff_format_leaves_the_tree_as_it_is():
    """The tree is formatted by ``ruff format`` (``[tool.ruff.format]``); the size budget counts
    statements, so formatting never pushes code over it (tests/test_layout.py)."""
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff is not None, "ruff is in the dev extra: pip install -e '.[dev]'"
    done = subprocess.run(
        [ruff, "format", "--no-cache", "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, "run `ruff format .`: " + done.stdout[-3000:] + done.stderr[-1000:]
