"""Crash safety end to end: a tiny ``evolora evolve`` run is killed (SIGKILL, SIGTERM) at
several points and resumed with ``--resume``; its metrics match an uninterrupted run's
record for record (wall-clock fields aside)."""

from __future__ import annotations

import pytest

import signal

from crash_helpers import TINY, finish, kill_when, start, strip
from evolora.io import read_jsonl

pytestmark = pytest.mark.slow  # over ~5 s each: CI runs them, `-m "not slow"` skips them


def test_kill_at_several_points_then_resume_matches_uninterrupted(crash_reference, tmp_path):
    out = tmp_path / "run"
    # 1. kill -9 right after the first step's record is written
    proc = start("tasks/gsm.yaml", "--out", str(out), *TINY)
    kill_when(proc, out, 1, signal.SIGKILL)
    assert finish(proc)[0] == -signal.SIGKILL
    # 2. resume, then SIGTERM: exit 130 and a message naming --resume
    proc = start("--resume", str(out))
    kill_when(proc, out, 2, signal.SIGTERM)
    code, output = finish(proc)
    assert code == 130, output
    assert f"--resume {out}" in " ".join(output.split())
    # 3. resume, then kill -9 while a checkpoint is being written (best effort: the
    #    temporary checkpoint directory must exist when the signal is sent)
    proc = start("--resume", str(out))
    kill_when(proc, out, 3, signal.SIGKILL, mid_checkpoint=True)
    finish(proc)
    # 4. resume to the end
    code, output = finish(start("--resume", str(out)))
    assert code == 0, output
    assert strip(read_jsonl(out / "metrics.jsonl")) == crash_reference["metrics"]
    assert read_jsonl(out / "matches.jsonl") == crash_reference["matches"]
