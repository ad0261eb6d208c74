"""``evolora cache``: show evolora's caches (path, kind, entries, size), or clear them.

Registered on the app by :mod:`evolora.cli`.
"""

from __future__ import annotations

from typing import Optional

import typer
from rich.table import Table

from evolora.cli.display import console, fail, os_failure, result_console


def cache_command(
    clear: bool = typer.Option(False, "--clear", help="Remove the entries (each is rebuilt when next needed)."),
    kind: Optional[list[str]] = typer.Option(None, "--kind", help="Only this kind: models or held_out (repeatable)."),
) -> None:
    """Show evolora's caches ($EVOLORA_CACHE, else the user cache folder), or clear them with --clear."""
    from evolora.caches import CACHE_KINDS, clear_cache, list_caches

    unknown = sorted(set(kind or ()) - set(CACHE_KINDS))
    if unknown:
        fail(f"--kind {', '.join(unknown)} is not a cache kind; the kinds are {', '.join(CACHE_KINDS)}")
    try:
        if clear:
            removed = clear_cache(kind or None)
            for name, count in removed.items():
                console.print(f"cleared {count} {name} entr{'y' if count == 1 else 'ies'}", highlight=False)
            return
        caches = [info for info in list_caches() if not kind or info.kind in kind]
    except OSError as error:
        os_failure(
            error, "the caches only save time, and entries not yet removed are as they were", writing="the cache folder"
        )
    table = Table(title="evolora caches")
    for column in ("kind", "path", "entries", "size", "holds"):
        table.add_column(column, overflow="fold")
    for info in caches:
        entries = str(info.entries) + (f" ({info.unusable} unusable)" if info.unusable else "")
        table.add_row(info.kind, str(info.path), entries, _size(info.size), CACHE_KINDS[info.kind])
    result_console().print(table)


def _size(size: int) -> str:
    """``size`` bytes as ``0 B``, ``12.3 kB``, ``513.2 MB``."""
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"
