"""Helpers for tests that kill ``evolora evolve`` subprocesses and resume them (not a test module)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from evolora.io import read_jsonl

STEPS = 5
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
    f"run.steps={STEPS}",
    "--set",
    "evolution.every=1",
    "--set",
    "run.checkpoint_every=1",
]
TIMING = ("seconds", "tokens_per_second", "peak_rss_mb")
CLI = [sys.executable, "-c", "from evolora.cli import app; app()"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}


# Runs ``evolora`` with a signal sent to itself at an exact point, chosen by EVOLORA_TEST_KILL
# ("RECORDS,SIGNAL,MID"): right after metrics.jsonl reaches RECORDS records or, with MID=1, after the
# first file of the next checkpoint is written into its temporary directory. The product code runs
# unchanged; only the moment of the signal is fixed, so no test races a poll against a fast run.
_SELF_KILL = """
import os
import evolora.callbacks as callbacks, evolora.checkpoint as checkpoint
records, sig, mid = (int(x) for x in os.environ.pop("EVOLORA_TEST_KILL").split(","))
armed = False
log, write = callbacks.JsonlLogger.__call__, checkpoint._write
def logged(self, run, record, games):
    global armed
    log(self, run, record, games)
    if len((run.out_dir / callbacks.METRICS).read_text().splitlines()) >= records:
        armed = True
        if not mid:
            os.kill(os.getpid(), sig)
def written(path, data):
    write(path, data)
    if armed and path.parent.name.startswith("."):
        os.kill(os.getpid(), sig)
callbacks.JsonlLogger.__call__, checkpoint._write = logged, written
from evolora.cli import app
app()
"""


def start(*args: str, kill: tuple[int, int] | None = None, mid_checkpoint: bool = False) -> subprocess.Popen:
    """``evolora evolve ARGS --no-eval`` in a subprocess, stdout and stderr together.

    ``kill=(records, sig)``: the run sends itself ``sig`` once metrics.jsonl holds ``records``
    records, or with ``mid_checkpoint`` while the next checkpoint is half written.
    """
    env, command = ENV, CLI
    if kill is not None:
        env = {**ENV, "EVOLORA_TEST_KILL": f"{kill[0]},{int(kill[1])},{int(mid_checkpoint)}"}
        command = [sys.executable, "-c", _SELF_KILL]
    return subprocess.Popen(
        [*command, "evolve", *args, "--no-eval"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    """Wait for ``proc``: (exit code, output). A tiny run takes seconds; the bound leaves room for a
    machine whose cores are shared by other jobs and by a second test worker."""
    output, _ = proc.communicate(timeout=timeout)
    return proc.returncode, output


def killed(proc: subprocess.Popen) -> str:
    """Wait for a run started with ``kill=(…, SIGKILL)``; fail unless SIGKILL ended it. Its output."""
    code, output = finish(proc)
    if code != -signal.SIGKILL:
        pytest.fail(f"the run was to be killed (SIGKILL) but exited {code}:\n{output}")
    return output


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


def shared_uninterrupted(root: Path) -> dict[str, list[dict]]:
    """:func:`uninterrupted` run once in ``root/crash-reference`` for every process that asks (pytest-xdist
    workers pass the folder their temporary folders share): the first one runs it under a lock and
    writes ``reference.json``; the others wait for the lock and read that file."""
    import fcntl
    import json

    out = root / "crash-reference"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        saved = out / "reference.json"
        if not saved.is_file():
            saved.write_text(json.dumps(uninterrupted(out / "uninterrupted")))
        return json.loads(saved.read_text())
