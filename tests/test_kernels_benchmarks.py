"""The GPU scripts of the fused pieces (``gpu_step.py``, ``gpu_kernels.py``) import and run their CPU
parts; their GPU figures need a GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from run_helpers import benchmark_module

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, timeout: int = 300) -> str:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _help(name: str, monkeypatch, capsys) -> str:
    """``benchmarks/<name>.py --help`` in this process (the runs below start the script itself)."""
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    with pytest.raises(SystemExit) as exited:
        benchmark_module(name).main()
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_gpu_step_help_and_host_stop_check(monkeypatch, capsys):
    text = _help("gpu_step", monkeypatch, capsys)
    assert "--stop-check-only" in text and "--no-fused-mlp" in text and "--no-flash-decode" in text
    out = _run("benchmarks/gpu_step.py", "--device", "cpu", "--quick", "--stop-check-only")
    assert "flagged rows" in out and "equal ends" in out


def test_gpu_kernels_without_a_gpu_checks_nothing_and_says_so(monkeypatch, capsys):
    assert "--device" in _help("gpu_kernels", monkeypatch, capsys)
    if not __import__("torch").cuda.is_available():
        assert "checked nothing" in _run("benchmarks/gpu_kernels.py")


@pytest.mark.slow
def test_gpu_kernels_quick_interpreted_on_the_cpu():
    pytest.importorskip("triton", reason="the kernels' check needs triton (pip install 'evolora[gpu]')")
    out = _run("benchmarks/gpu_kernels.py", "--device", "cpu", "--quick")
    assert "all checks passed" in out and "static q/k/v column order" in out
    assert re.search(r"SiLU·mul of 96 columns, rows 8: fp32 max \|Δ\| ", out)
    assert re.search(r"attention 2 q heads per k/v head, D 16, rows 8: fp32 max \|Δ\| ", out)


@pytest.mark.slow
def test_gpu_step_quick_runs_every_part_on_the_cpu():
    out = _run("benchmarks/gpu_step.py", "--device", "cpu", "--quick")
    for variant in ("bare", "base rows", "routed"):
        assert re.search(rf"\ntorch +{variant} ", out)
    assert "target routed / truly bare" in out and "flagged" in out
    assert re.search(r"\ntorch +routed +[\d.]+ +- +\d+ +- +\d+ ", out)  # ops per layer, on the CPU
