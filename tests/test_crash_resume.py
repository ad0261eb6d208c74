"""Crash safety end to end: a tiny ``evolora evolve`` run is killed (SIGKILL, SIGTERM) at
several points and resumed with ``--resume``; its metrics match an uninterrupted run's
record for record (wall-clock fields aside)."""

from __future__ import annotations

import signal

import pytest
from crash_helpers import TINY, finish, killed, start, strip

from evolora.io import read_jsonl

pytestmark = pytest.mark.slow  # over ~5 s each: CI runs them, `-m "not slow"` skips them


def test_kill_at_several_points_then_resume_matches_uninterrupted(crash_reference, tmp_path):
    out = tmp_path / "run"
    # 1. kill -9 right after the first step's record is written
    killed(start("tasks/gsm.yaml", "--out", str(out), *TINY, kill=(1, signal.SIGKILL)))
    assert len(read_jsonl(out / "metrics.jsonl")) == 1
    # 2. resume, then SIGTERM: exit 130 and a message naming --resume
    code, output = finish(start("--resume", str(out), kill=(2, signal.SIGTERM)))
    assert code == 130, output
    assert f"--resume {out}" in " ".join(output.split())
    # 3. resume, then kill -9 while step 3's checkpoint is half written
    killed(start("--resume", str(out), kill=(3, signal.SIGKILL), mid_checkpoint=True))
    assert list((out / "checkpoints").glob(".step_000003.*")), "no half-written checkpoint was left"
    # 4. resume to the end
    code, output = finish(start("--resume", str(out)))
    assert code == 0, output
    assert strip(read_jsonl(out / "metrics.jsonl")) == crash_reference["metrics"]
    assert read_jsonl(out / "matches.jsonl") == crash_reference["matches"]
