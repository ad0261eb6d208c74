"""Helpers for tests that kill ``evolora evolve`` subprocesses and resume them (not a test module)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evolora.io import read_jsonl

STEPS = 5
TINY = ["--set", "model.name=tiny-random", "--set", "lora.rank=2", "--set", "selfplay.teacher_max_new_tokens=8",
        "--set", "selfplay.student_max_new_tokens=8", "--set", "eval.limit=0", "--set", f"run.steps={STEPS}",
        "--set", "evolution.every=1", "--set", "run.checkpoint_every=1"]
TIMING = ("seconds", "tokens_per_second", "peak_rss_mb")
CLI = [sys.executable, "-c", "from evolora.cli import app; app()"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}


def start(*args: str) -> subprocess.Popen:
    """``evolora evolve ARGS --no-eval`` in a subprocess, stdout and stderr together."""
    return subprocess.Popen([*CLI, "evolve", *args, "--no-eval"], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str]:
    """Wait for ``proc``: (exit code, output)."""
    output, _ = proc.communicate(timeout=timeout)
    return proc.returncode, output


def kill_when(proc: subprocess.Popen, out: Path, records: int, sig: int, *, mid_checkpoint: bool = False) -> int:
    """Send ``sig`` once metrics.jsonl holds ``records`` records (and, with ``mid_checkpoint``,
    as soon as a checkpoint is being written); return how many records there were."""
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        count = len(read_jsonl(out / "metrics.jsonl"))
        writing = any(p.name.startswith(".step_") for p in (out / "checkpoints").glob(".*"))
        if count >= records and (not mid_checkpoint or writing):
            proc.send_signal(sig)
            return count
        time.sleep(0.002 if mid_checkpoint else 0.02)
    pytest.fail(f"the run ended before {records} records (exit {proc.returncode})")


def strip(records: list[dict]) -> list[dict]:
    """Records without their wall-clock fields, which differ between runs."""
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]


def uninterrupted(out: Path) -> dict[str, list[dict]]:
    """Run the tiny job to its end in ``out``; its metrics (timing stripped) and matches."""
    code, output = finish(start("tasks/gsm.yaml", "--out", str(out), *TINY))
    assert code == 0, output
    records = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    return {"metrics": strip(records), "matches": read_jsonl(out / "matches.jsonl")}
