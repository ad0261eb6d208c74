"""Crash safety end to end: a tiny ``evolora evolve`` run is killed (SIGKILL, SIGTERM) at
several points and resumed with ``--resume``; its metrics match an uninterrupted run's
record for record (wall-clock fields aside)."""

from __future__ import annotations

import os
import signal
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


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([*CLI, "evolve", *args, "--no-eval"], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen, timeout: float = 120) -> tuple[int, str]:
    output, _ = proc.communicate(timeout=timeout)
    return proc.returncode, output


def _kill_when(proc: subprocess.Popen, out: Path, records: int, sig: int, *, mid_checkpoint: bool = False) -> int:
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


def _strip(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, list[dict]]:
    out = tmp_path_factory.mktemp("crash") / "uninterrupted"
    code, output = _finish(_start("tasks/gsm.yaml", "--out", str(out), *TINY))
    assert code == 0, output
    records = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    return {"metrics": _strip(records), "matches": read_jsonl(out / "matches.jsonl")}


def test_kill_at_several_points_then_resume_matches_uninterrupted(reference, tmp_path):
    out = tmp_path / "run"
    # 1. kill -9 right after the first step's record is written
    proc = _start("tasks/gsm.yaml", "--out", str(out), *TINY)
    _kill_when(proc, out, 1, signal.SIGKILL)
    assert _finish(proc)[0] == -signal.SIGKILL
    # 2. resume, then SIGTERM: exit 130 and a message naming --resume
    proc = _start("--resume", str(out))
    _kill_when(proc, out, 2, signal.SIGTERM)
    code, output = _finish(proc)
    assert code == 130, output
    assert f"--resume {out}" in " ".join(output.split())
    # 3. resume, then kill -9 while a checkpoint is being written (best effort: the
    #    temporary checkpoint directory must exist when the signal is sent)
    proc = _start("--resume", str(out))
    _kill_when(proc, out, 3, signal.SIGKILL, mid_checkpoint=True)
    _finish(proc)
    # 4. resume to the end
    code, output = _finish(_start("--resume", str(out)))
    assert code == 0, output
    assert _strip(read_jsonl(out / "metrics.jsonl")) == reference["metrics"]
    assert read_jsonl(out / "matches.jsonl") == reference["matches"]
