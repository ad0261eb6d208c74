"""The GPU scripts of the fused pieces import and run their CPU parts (their GPU figures need a GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, timeout: int = 300) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_gpu_step_help_and_host_stop_check():
    assert "--stop-check-only" in _run("benchmarks/gpu_step.py", "--help")
    out = _run("benchmarks/gpu_step.py", "--device", "cpu", "--quick", "--stop-check-only")
    assert "flagged rows" in out and "equal ends" in out


@pytest.mark.slow
def test_gpu_step_quick_runs_every_part_on_the_cpu():
    out = _run("benchmarks/gpu_step.py", "--device", "cpu", "--quick")
    for variant in ("bare", "base rows", "routed"):
        assert f"\n{variant} " in out
    assert "routed / truly bare" in out
