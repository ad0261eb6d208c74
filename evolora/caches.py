"""evolora's caches on disk: what each holds, how large it is, and clearing it.

Two kinds live under :func:`evolora.model.cache_dir`:

* ``models``: embedded GGUF models converted to safetensors, one directory per model
  (:mod:`evolora.model.converted`; ~540 MB for the embedded SmolLM2);
* ``held_out``: the base model's greedy held-out answers, one JSON file per key
  (:mod:`evolora.evaluation.base_cache`; a few kB each).

Both only save time: a cleared entry is rebuilt the next time it is needed (a conversion of
~20 s, or one evaluation of the base). Clearing an entry takes the lock its writer takes, so it
never removes a conversion in progress.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

CACHE_KINDS: dict[str, str] = {
    "models": "embedded GGUF models converted to safetensors (rebuilt in ~20 s when needed)",
    "held_out": "the base model's greedy held-out answers (rebuilt by one evaluation of the base)",
}
"""Cache kind (its folder under the cache directory) -> what it holds."""


@dataclass(frozen=True)
class CacheInfo:
    """One cache kind on disk.

    Attributes:
        kind: a key of :data:`CACHE_KINDS`.
        path: its folder (may not exist).
        entries: number of entries (model directories, or answer files).
        size: bytes of every file in it.
        unusable: entries that would not be used (a model directory whose manifest, key or file
            sizes do not match, e.g. one written by an older evolora).
    """

    kind: str
    path: Path
    entries: int
    size: int
    unusable: int


def _entries(kind: str, folder: Path) -> list[Path]:
    """The entries of one cache folder, hidden files (locks, conversions in progress) left out."""
    if not folder.is_dir():
        return []
    if kind == "models":
        return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".json" and not p.name.startswith("."))


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def list_caches(root: Path | None = None) -> list[CacheInfo]:
    """Each cache kind with its folder, entry count, size in bytes and unusable entries.

    Args:
        root: the cache directory (None: :func:`evolora.model.cache_dir`).

    Raises:
        OSError: a folder cannot be read (e.g. EACCES).
    """
    from evolora.model import cache_dir
    from evolora.model.converted import entry_problem

    root = cache_dir() if root is None else Path(root)
    found = []
    for kind in CACHE_KINDS:
        folder = root / kind
        entries = _entries(kind, folder)
        unusable = sum(entry_problem(p, full=False) is not None for p in entries) if kind == "models" else 0
        found.append(CacheInfo(kind, folder, len(entries), sum(_size(p) for p in entries), unusable))
    return found


def clear_cache(kinds: list[str] | None = None, root: Path | None = None) -> dict[str, int]:
    """Remove every entry of the given cache kinds; each is rebuilt when next needed.

    Args:
        kinds: keys of :data:`CACHE_KINDS` (None: all of them).
        root: the cache directory (None: :func:`evolora.model.cache_dir`).

    Returns:
        {kind: number of entries removed}.

    Raises:
        ValueError: an unknown kind (the message lists the kinds).
        OSError: an entry cannot be removed (EACCES, EROFS, ...); the entries before it are gone,
            the others are as they were.
    """
    from evolora.model import cache_dir
    from evolora.model.gguf import _file_lock

    unknown = sorted(set(kinds or ()) - set(CACHE_KINDS))
    if unknown:
        raise ValueError(f"unknown cache kind {', '.join(unknown)}; the kinds are {', '.join(CACHE_KINDS)}")
    root = cache_dir() if root is None else Path(root)
    removed = {}
    for kind in kinds or list(CACHE_KINDS):
        entries = _entries(kind, root / kind)
        for entry in entries:
            if entry.is_dir():
                with _file_lock(entry.parent / f".{entry.name}.lock"):  # the converter's lock
                    shutil.rmtree(entry)
            else:
                entry.unlink()
        removed[kind] = len(entries)
    return removed
