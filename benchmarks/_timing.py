"""Timing helper shared by the benchmark scripts (run as ``python benchmarks/NAME.py``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], repeats: int, *, warmup: bool = True) -> float:
    """Median wall-clock seconds of ``repeats`` calls of ``fn`` (after one untimed call if ``warmup``)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)
