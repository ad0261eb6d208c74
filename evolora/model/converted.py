"""The converted-model cache proves what it holds: a manifest keyed by what decides the content,
and a SHA-256 of every file, checked on read.

A converted directory (:func:`evolora.model.gguf.convert_gguf`) holds ``config.json``,
``model.safetensors``, the tokenizer files and :data:`MANIFEST`::

    {"format": 1, "key": {"recipe": 2, "dtype": "float32", "transformers": "4.57.1",
                          "source": {"name": "X.gguf", "size": 101, "sha256": "..."}},
     "files": {"model.safetensors": {"size": 538090408, "sha256": "..."}, ...}}

The key names what decides the content: the GGUF file (name, size and SHA-256, so a reinstall of
the same file in another environment reuses the entry and another file of the same name does not), the
dtype written, the converter's recipe (:data:`RECIPE`) and the transformers version that dequantizes.
:func:`entry_problem` says why an entry cannot be used (missing, no manifest, another key, a file
missing, truncated or altered); the loader then converts again, with one line saying so, and never
loads a damaged entry. Hashing the 538 MB of the embedded model on each load takes 0.6 s (one Intel
Xeon core, load 2 on two cores) to 1.6 s (load 7): 4 to 6 times a warm ``from_pretrained``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MANIFEST = "evolora-cache.json"
"""The manifest's file name inside a converted directory."""

FORMAT = 1
"""The manifest's layout."""

RECIPE = 2
"""The converter's version: bump when :func:`evolora.model.gguf.convert_gguf` changes what it writes."""

DTYPE = "float32"
"""The dtype the converter writes (it dequantizes to fp32)."""

REQUIRED = ("config.json", "model.safetensors")
"""Files every converted directory holds."""


def source_identity(gguf_file: Path) -> dict | None:
    """``{"name", "size", "sha256"}`` of the GGUF file, or None when it cannot be read (a wheel
    uninstalled after conversion: the entry is then checked by its content alone). The content hash,
    not the modification time: every install of the same wheel writes the file anew (0.1 s for the
    98 MB embedded GGUF)."""
    try:
        path = Path(gguf_file)
        return {"name": path.name, "size": path.stat().st_size, "sha256": file_sha256(path)}
    except OSError:
        return None


def entry_key(source: dict | None) -> dict:
    """What decides a converted entry's content: recipe, dtype, transformers version and ``source``
    (:func:`source_identity`; None: unknown, not compared)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        converter = version("transformers")  # read from the metadata: transformers itself is not imported
    except PackageNotFoundError:
        converter = None
    return {"recipe": RECIPE, "dtype": DTYPE, "transformers": converter, "source": source}


def file_sha256(path: Path) -> str:
    """SHA-256 (hex) of the file at ``path``, read in 1 MiB chunks.

    Raises:
        OSError: the file cannot be read.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(directory: Path, source: dict | None) -> None:
    """Write :data:`MANIFEST` into ``directory``: the key of ``source`` and the size and SHA-256 of
    every other file in it (called on the temporary directory, before it is renamed into place).

    Raises:
        OSError: a file cannot be read or the manifest cannot be written.
    """
    files = {
        path.name: {"size": path.stat().st_size, "sha256": file_sha256(path)}
        for path in sorted(Path(directory).iterdir())
        if path.is_file() and path.name != MANIFEST
    }
    manifest = {"format": FORMAT, "key": entry_key(source), "files": files}
    with open(Path(directory) / MANIFEST, "w") as handle:
        handle.write(json.dumps(manifest, indent=1))
        handle.flush()
        os.fsync(handle.fileno())


def entry_problem(directory: Path, source: dict | None = None, *, full: bool = True) -> str | None:
    """Why the converted entry in ``directory`` cannot be used, or None when it can.

    Args:
        directory: the converted directory.
        source: :func:`source_identity` of the GGUF file it must come from (None: not compared).
        full: also hash every file against its SHA-256 (0.6 s or more for the embedded model); False checks
            the manifest, the key and the file sizes only (a cheap look, nothing is hashed).

    Returns:
        None, ``"missing"`` when there is no directory, or a short reason such as
        ``"model.safetensors is 1024 bytes, not 538090408 (truncated or replaced)"``.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return "missing"
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"no {MANIFEST}: written by an older evolora, or not by evolora"
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return f"{MANIFEST} is unreadable ({getattr(error, 'strerror', None) or type(error).__name__})"
    problem = _manifest_problem(manifest, source)
    if problem is not None:
        return problem
    for name, expected in manifest["files"].items():
        problem = _file_problem(directory / name, expected, full=full)
        if problem is not None:
            return problem
    return None


def _manifest_problem(manifest, source: dict | None) -> str | None:
    """Why a parsed manifest does not describe an entry for ``source``, or None."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return f"{MANIFEST} has another layout"
    files, key = manifest.get("files"), manifest.get("key")
    if not isinstance(files, dict) or not all(name in files for name in REQUIRED) or not isinstance(key, dict):
        return f"{MANIFEST} lists no {' and '.join(REQUIRED)}"
    expected = entry_key(source)
    for field, value in expected.items():
        if (field != "source" or source is not None) and key.get(field) != value:
            return f"converted with another {field} ({key.get(field)!r}, now {value!r})"
    return None


def _file_problem(path: Path, expected, *, full: bool) -> str | None:
    """Why the file at ``path`` is not the one the manifest lists (``expected``: size, sha256), or None."""
    if not isinstance(expected, dict):
        return f"{MANIFEST} is damaged"
    try:
        size = path.stat().st_size
    except OSError:
        return f"{path.name} is missing"
    if size != expected.get("size"):
        return f"{path.name} is {size} bytes, not {expected.get('size')} (truncated or replaced)"
    try:
        if full and file_sha256(path) != expected.get("sha256"):
            return f"{path.name} does not match its SHA-256 (altered or damaged)"
    except OSError as error:
        return f"{path.name} is unreadable ({error.strerror})"
    return None
