"""The version guard: torch, transformers and peft outside the tested range say so in one line, at start.

The tested ranges are the package's own requirements (``pyproject.toml``: ``torch>=2.13,<2.15``,
``transformers==5.24.0``, ``peft==0.21.2``), read from the installed metadata, so they are written
once. What is outside them is, per package:

* **an error** (:class:`VersionError`) for a ``transformers`` older than the range: the routed
  engine and the log-probs call its decoder with ``cache=`` and read ``.cache`` from its outputs,
  an API older releases lack (5.17 fails deep in a rollout with ``'BaseModelOutputWithPast' object
  has no attribute 'cache'``);
* **a warning** otherwise: a newer ``transformers``, any other ``peft``, or a ``torch`` outside the
  range (a GPU image's torch 2.11 runs evolora's code paths; only its numbers are untested).

Set ``EVOLORA_ALLOW_UNTESTED=1`` to turn the error into a warning (at your own risk).
"""

from __future__ import annotations

import importlib.metadata
import os
import tomllib
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

GUARDED = ("torch", "transformers", "peft")
"""The packages whose versions are checked."""

BREAKS_BELOW = {
    "transformers": "its decoder outputs lack .cache (5.17: \"'BaseModelOutputWithPast' object "
    "has no attribute 'cache'\")"
}
"""Packages for which a version older than the tested range is an error, and why."""

ALLOW_ENV = "EVOLORA_ALLOW_UNTESTED"
"""Set to ``1`` to turn the version errors into warnings."""


class VersionError(ValueError):
    """A guarded package is installed at a version evolora is known not to run with (a ValueError, so
    the command line reports it as one error line like any other bad input)."""


class VersionWarning(UserWarning):
    """A guarded package is installed at a version outside the tested range."""


PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
"""The requirements of a source checkout run without installing it (``PYTHONPATH=.`` on a GPU image)."""


def required() -> dict[str, str]:
    """{package: specifier} of :data:`GUARDED` from evolora's requirements, e.g.
    ``{"torch": ">=2.13,<2.15", ...}``: the installed metadata, else :data:`PYPROJECT` of a source
    checkout; {} when neither is there."""
    from packaging.requirements import Requirement

    try:
        lines = importlib.metadata.requires("evolora") or []
    except importlib.metadata.PackageNotFoundError:
        if not PYPROJECT.is_file():
            return {}
        with PYPROJECT.open("rb") as file:
            lines = tomllib.load(file).get("project", {}).get("dependencies", [])
    out = {}
    for line in lines:
        requirement = Requirement(line)
        if requirement.name in GUARDED and requirement.marker is None:
            out[requirement.name] = ",".join(sorted(map(str, requirement.specifier), key=lambda s: s[0] != ">"))
    return out


def installed() -> dict[str, str]:
    """{package: installed version} of :data:`GUARDED` (a package that is not installed is left out)."""
    out = {}
    for name in GUARDED:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def check_versions(
    versions: Mapping[str, str] | None = None, requirements: Mapping[str, str] | None = None
) -> list[str]:
    """Compare installed versions with the tested ranges.

    Args:
        versions: {package: version}; default :func:`installed`.
        requirements: {package: specifier such as ``"==5.24.0"``}; default :func:`required`.

    Returns:
        One warning line per package outside its range that still runs (see the module docstring).

    Raises:
        VersionError: a package older than its range that is known to break (:data:`BREAKS_BELOW`),
            unless ``EVOLORA_ALLOW_UNTESTED=1``; the one-line message names the installed and the
            required versions and the ``pip install`` that fixes it.
    """
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    versions = installed() if versions is None else versions
    requirements = required() if requirements is None else requirements
    lines = []
    for name, spec in requirements.items():
        if name not in versions:
            continue
        specifier, version = SpecifierSet(spec), Version(versions[name])
        if specifier.contains(version, prereleases=True):
            continue
        fix = f"pip install '{name}{spec}'"
        older = any(
            s.operator in (">=", ">", "==", "~=") and version < Version(s.version.removesuffix(".*")) for s in specifier
        )
        if older and name in BREAKS_BELOW:
            line = (
                f"{name} {version} is installed; evolora needs {name}{spec}: {BREAKS_BELOW[name]}; "
                f"install it with: {fix}"
            )
            if os.environ.get(ALLOW_ENV) != "1":
                raise VersionError(f"{line} (or set {ALLOW_ENV}=1 to try anyway)")
            lines.append(line)
        else:
            lines.append(
                f"{name} {version} is installed; evolora is tested with {name}{spec}; "
                f"if something fails, install a tested one: {fix}"
            )
    return lines


_checked = False


def guard_versions(report: Callable[[str], None] | None = None) -> None:
    """:func:`check_versions` once per process (every model load calls it): raise its error, or
    pass each warning line to ``report`` (default: :func:`warnings.warn` with :class:`VersionWarning`).

    Raises:
        VersionError: as :func:`check_versions` (again on every call until it is fixed).
    """
    global _checked
    if _checked:
        return
    lines = check_versions()
    _checked = True
    for line in lines:
        if report is None:
            warnings.warn(line, VersionWarning, stacklevel=2)
        else:
            report(line)
