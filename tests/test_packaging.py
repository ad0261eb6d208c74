"""The wheel holds every package of the source tree: a non-editable ``pip install .`` imports all of evolora."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_subpackage_is_listed_in_pyproject() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "evolora").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    missing = sorted(found - listed)
    assert not missing, f"packages missing from [tool.setuptools] packages in pyproject.toml: {missing}"
    for name, folder in setuptools["package-dir"].items():
        assert (ROOT / folder).is_dir(), f"package-dir {name} -> {folder} does not exist"
    assert {"evolora.operators", "evolora.presets"} <= listed
