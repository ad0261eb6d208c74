"""The shipped run configs (``tasks/*.yaml``) as presets: ``evolora evolve gsm`` and
``load_config("arith")`` work from any folder, and ``evolora init gsm`` writes an editable copy.

The presets are the repository's ``tasks/*.yaml`` files themselves: the wheel ships that folder
as ``evolora/presets`` (``pyproject.toml`` package-dir); a source checkout reads it in place.
"""

from __future__ import annotations

from pathlib import Path

from evolora.config.types import ConfigError

__all__ = ["preset_dir", "preset_names", "preset_path", "resolve_config_path"]


def preset_dir() -> Path:
    """The folder that holds the presets: ``evolora/presets`` in an installed wheel, else the
    checkout's ``tasks/`` (an editable install)."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "presets"
    return installed if installed.is_dir() else package.parent / "tasks"


def preset_names() -> list[str]:
    """The preset names, sorted (``arith``, ``gsm``, ...: the file names without ``.yaml``)."""
    return sorted(path.stem for path in preset_dir().glob("*.yaml"))


def preset_path(name: str) -> Path:
    """The YAML file of preset ``name`` (``gsm`` or ``gsm.yaml``).

    Raises:
        ConfigError: no preset has that name; the message lists the presets.
    """
    stem = name.removesuffix(".yaml")
    path = preset_dir() / f"{stem}.yaml"
    if "/" in stem or "\\" in stem or not path.is_file():
        raise ConfigError(f"no preset named {name!r}; the presets are {', '.join(preset_names())}")
    return path


def resolve_config_path(path: str | Path) -> Path:
    """``path`` itself when such a file exists (paths keep working), else the preset of that bare
    name (``gsm``, ``arith.yaml``); otherwise ``path`` unchanged, so reading it names the path."""
    path = Path(path)
    if path.exists() or len(path.parts) != 1:
        return path
    try:
        return preset_path(path.name)
    except ConfigError:
        return path
