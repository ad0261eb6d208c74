"""Run directories: the one-process lock, log repair on resume, checksummed checkpoints, and a
full disk that exits 2 with the last checkpoint intact."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time

import pytest
import torch
from typer.testing import CliRunner

from evolora.checkpoint import CheckpointError, checkpoint_problem, latest_checkpoint, load_checkpoint, save_checkpoint
from evolora.cli import app
from evolora.io import read_jsonl
from evolora.run_dir import RunDirLocked, lock_run_dir, log_counts, repair_logs

TINY = [
    "--set",
    "model.name=tiny-random",
    "--set",
    "lora.rank=2",
    "--set",
    "selfplay.roles.teacher.max_new_tokens=8",
    "--set",
    "selfplay.roles.student.max_new_tokens=8",
    "--set",
    "eval.limit=0",
    "--set",
    "run.steps=2",
    "--set",
    "evolution.every=1",
    "--set",
    "run.checkpoint_every=1",
]


# -- the lock -----------------------------------------------------------------------------------
def test_a_second_holder_is_refused_with_the_first_ones_pid_until_it_dies(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from evolora.run_dir import lock_run_dir\n"
                f"with lock_run_dir({str(tmp_path)!r}):\n    print('held', flush=True); time.sleep(60)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirLocked, match=f"in use by process {holder.pid}"):
            with lock_run_dir(tmp_path):
                pass
    finally:
        holder.kill()  # SIGKILL: no cleanup code runs, the kernel drops the lock
        holder.wait()
    with lock_run_dir(tmp_path):
        assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())


def test_the_cli_refuses_a_locked_run_directory_before_loading_a_model(tmp_path):
    out = tmp_path / "run"
    with lock_run_dir(out):  # another open file description: conflicts like another process
        began = time.perf_counter()
        result = CliRunner().invoke(app, ["evolve", "tasks/gsm.yaml", "--out", str(out), *TINY])
    assert result.exit_code == 2, result.output
    assert f"inusebyprocess{os.getpid()}" in "".join(result.output.split())
    assert time.perf_counter() - began < 10 and not (out / "metrics.jsonl").exists()


# -- log repair ---------------------------------------------------------------------------------
def _write(path, records, tail=""):
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)


def test_repair_keeps_steps_up_to_the_checkpoint_each_once_and_drops_a_torn_line(tmp_path):
    metrics = [{"step": s, "games": 2} for s in (1, 2, 3, 4, 4, 5, 5)]  # two writers once ran here
    matches = [{"step": s, "game": g} for s in (1, 2, 3, 4) for g in (0, 1)]
    matches += [{"step": 4, "game": 0}, {"step": 4, "game": 1}, {"step": 5, "game": 0}]
    _write(tmp_path / "metrics.jsonl", metrics, tail='{"step": 6, "ga')
    _write(tmp_path / "matches.jsonl", matches)
    assert repair_logs(tmp_path, 4) == []
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]
    kept = read_jsonl(tmp_path / "matches.jsonl")
    assert [(r["step"], r["game"]) for r in kept] == [(s, g) for s in (1, 2, 3, 4) for g in (0, 1)]
    assert log_counts(tmp_path) == {"metrics": 4, "matches": 8}
    assert (tmp_path / "metrics.jsonl").read_text().endswith("\n")


def test_a_damaged_middle_line_costs_that_record_only_and_is_reported(tmp_path):
    lines = [json.dumps({"step": s, "games": 0}) for s in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("\n".join([lines[0], "\x00garbage", lines[2]]) + "\n")
    notes = repair_logs(tmp_path, 3)
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 3]
    assert any("metrics.jsonl:2" in n for n in notes) and any("[2]" in n for n in notes)


def test_a_complete_last_record_without_its_newline_is_kept(tmp_path):
    _write(tmp_path / "metrics.jsonl", [{"step": 1}], tail=json.dumps({"step": 2}))
    repair_logs(tmp_path, 2)
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2]


# -- checksummed checkpoints -----------------------------------------------------------------------
def _checkpoint(run_dir, step):
    factors = {"s0": {"m": (torch.full((2, 3), float(step)), torch.zeros(3, 2))}}
    return save_checkpoint(run_dir, step, factors=factors, optimizers={"s0": {}}, state={"x": step}, keep=3)


def test_a_truncated_newest_checkpoint_is_skipped_for_the_previous_one(tmp_path):
    _checkpoint(tmp_path, 1)
    newest = _checkpoint(tmp_path, 2)
    manifest = json.loads((newest / "manifest.json").read_text())
    assert set(manifest) == {"factors.safetensors", "optimizers.pt", "state.json"}
    assert checkpoint_problem(newest) is None
    data = (newest / "factors.safetensors").read_bytes()
    (newest / "factors.safetensors").write_bytes(data[: len(data) // 2])
    assert "factors.safetensors" in checkpoint_problem(newest)
    with pytest.warns(UserWarning, match="step_000002 is damaged"):
        chosen = latest_checkpoint(tmp_path)
    assert chosen.name == "step_000001"
    factors, _, state = load_checkpoint(chosen)
    assert state["step"] == 1 and torch.equal(factors["s0"]["m"][0], torch.full((2, 3), 1.0))
    with pytest.raises(CheckpointError, match="damaged"):
        load_checkpoint(newest)


def test_an_edited_state_file_fails_its_checksum_and_none_intact_is_an_error(tmp_path):
    only = _checkpoint(tmp_path, 1)
    state = json.loads((only / "state.json").read_text())
    (only / "state.json").write_text(json.dumps({**state, "x": 99}, indent=1))
    assert "state.json" in checkpoint_problem(only)
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match="no intact checkpoint"):
        latest_checkpoint(tmp_path)
    assert latest_checkpoint(tmp_path / "fresh") is None


@pytest.mark.slow
def test_resume_with_a_truncated_newest_checkpoint_uses_the_older_one(tmp_path):
    out = tmp_path / "run"
    runner = CliRunner()
    result = runner.invoke(app, ["evolve", "tasks/gsm.yaml", "--out", str(out), *TINY, "--no-eval"])
    assert result.exit_code == 0, result.output
    newest = latest_checkpoint(out)
    (newest / "optimizers.pt").write_bytes((newest / "optimizers.pt").read_bytes()[:100])
    result = runner.invoke(app, ["evolve", "--resume", str(out), "--no-eval", "--set", "run.steps=3"])  # work left
    assert result.exit_code == 0, result.output
    text = "".join(result.output.split())  # rich wraps long paths anywhere
    assert "step_000002isdamaged" in text and "resumedatstep1" in text
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3]


# -- a full disk -----------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_full_or_read_only_disk_exits_2_and_keeps_the_last_checkpoint(tmp_path, monkeypatch, code):
    import evolora.checkpoint as checkpoint

    real, calls = checkpoint._write, []

    def write(path, data):  # the second checkpoint's second file hits the full disk
        calls.append(path)
        if len(calls) == 6:
            raise OSError(code, os.strerror(code), str(path))
        real(path, data)

    monkeypatch.setattr(checkpoint, "_write", write)
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["evolve", "tasks/gsm.yaml", "--out", str(out), *TINY, "--no-eval"])
    assert result.exit_code == 2, result.output
    text = "".join(result.output.split())
    assert ("nospaceleft" if code == errno.ENOSPC else "read-only") in text and f"--resume{out}" in text
    kept = latest_checkpoint(out)
    assert kept.name == "step_000001" and checkpoint_problem(kept) is None
    assert not list((out / "checkpoints").glob(".step_*"))  # the half-written one was removed
