"""Bounded oneDNN caches, so packed GEMMs of many shapes do not grow a run's memory.

A packed linear (:mod:`evolora.model.prepack`) builds one oneDNN primitive per input shape and keeps
it in two caches: oneDNN's primitive cache and ideep's own LRU cache of computations, each holding
up to 1,024 entries by default. A policy update meets a new row count M in almost every
micro-batch, so a run's memory grows step after step: measured (fp32, 1 thread, Intel Xeon with
AMX, torch 2.13), 600 distinct M through one packed 1536 × 576 weight grew the RSS by 365 MB, by
173 MB with the primitive cache alone bounded, and by 43 MB with both bounded at 64 entries
(``tests/test_onednn_cache.py`` repeats the measurement). A decode meets few shapes at a time (four
weight shapes at its batch's row count, cut when rows end), so :data:`CACHE_ENTRIES` keeps every
primitive it reuses.

The two caches read their capacity from the environment when first used, so the bound must be set
before the first oneDNN call of the process: :func:`evolora.model.load.load_base` sets it before
anything is packed. A capacity the user set in the environment is kept.
"""

from __future__ import annotations

import os

CACHE_ENTRIES = 8
"""Entries of each of the two oneDNN caches (their default is 1,024). Four default gsm steps (fp32,
2 threads, Intel Xeon with AMX) peaked at 2,427,460 KiB with 8 entries against 2,596,076 KiB with 64,
the same records and step times within their noise (docs/performance.md)."""

CAPACITY_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
"""oneDNN's primitive cache and ideep's computation cache, as each reads its capacity."""


def bound_onednn_caches(entries: int = CACHE_ENTRIES) -> dict[str, str]:
    """Set each oneDNN cache's capacity to ``entries`` where the environment does not set it.

    Takes effect only before the process's first oneDNN primitive (the caches read the variables
    once); afterwards it changes nothing.

    Args:
        entries: cache entries, >= 1.

    Returns:
        {variable: the capacity now in the environment}.

    Raises:
        ValueError: ``entries`` below 1 (checked before anything changes).
    """
    if entries < 1:
        raise ValueError(f"entries must be >= 1, got {entries}")
    return {name: os.environ.setdefault(name, str(entries)) for name in CAPACITY_VARIABLES}
