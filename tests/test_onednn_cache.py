"""Bounded oneDNN caches: packed GEMMs of many shapes no longer grow the process's memory."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from evolora.model.onednn_cache import CACHE_ENTRIES, CAPACITY_VARIABLES, bound_onednn_caches
from evolora.model.prepack import prepack_supported

GROWTH = """
import sys, torch
if sys.argv[1] == "bounded":
    from evolora.model.onednn_cache import bound_onednn_caches
    bound_onednn_caches()
torch.set_num_threads(1)
from evolora.model.prepack import pack_weight, packed_linear
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
packed = pack_weight(torch.randn(1536, 576))
x = torch.randn(1000, 576)
packed_linear(x[:8].contiguous(), packed, 1536)
start = rss_mb()
for m in range(100, 1000, 3):  # 300 row counts, as a run's update micro-batches
    packed_linear(x[:m].contiguous(), packed, 1536)
print(rss_mb() - start)
"""


def _growth_mb(mode: str) -> float:
    env = {k: v for k, v in os.environ.items() if k not in CAPACITY_VARIABLES}
    env["OMP_NUM_THREADS"] = "1"
    env["MALLOC_MMAP_THRESHOLD_"] = "65536"  # large blocks mmapped: growth is cached memory, not heap holes
    done = subprocess.run(
        [sys.executable, "-c", GROWTH, mode], capture_output=True, text=True, env=env, timeout=300, check=True
    )
    return float(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not prepack_supported(torch.float32),
    reason="needs oneDNN packing and /proc",
)
def test_bounded_caches_stop_the_growth_of_many_shapes():
    unbounded, bounded = _growth_mb("default"), _growth_mb("bounded")
    assert unbounded > 100, unbounded  # the default caches keep ~0.6 MB per shape of this weight
    assert bounded < 0.4 * unbounded, (bounded, unbounded)  # measured: 194 MB against 32 MB


def test_a_capacity_set_by_the_user_is_kept(monkeypatch):
    monkeypatch.setenv(CAPACITY_VARIABLES[0], "7")
    monkeypatch.setenv(CAPACITY_VARIABLES[1], "")  # recorded, so the value set below is undone after the test
    monkeypatch.delenv(CAPACITY_VARIABLES[1])
    assert bound_onednn_caches() == {CAPACITY_VARIABLES[0]: "7", CAPACITY_VARIABLES[1]: str(CACHE_ENTRIES)}


def test_entries_below_one_are_refused(monkeypatch):
    monkeypatch.setenv(CAPACITY_VARIABLES[0], "")
    monkeypatch.delenv(CAPACITY_VARIABLES[0])
    with pytest.raises(ValueError, match=">= 1"):
        bound_onednn_caches(0)
    assert CAPACITY_VARIABLES[0] not in os.environ
