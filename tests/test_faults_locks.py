"""Fault class "locks": two ``evolora evolve`` or ``evolora study`` processes on one directory never
both write. The run directory's lock is taken (one ``flock``) before anything is written, and
what the directory holds is read again under the lock: the second process gets the lock message,
or finds the first one's run and refuses it (evolve) or skips it (study). Every repetition ends
with one complete run directory whose every step is recorded once. The lock's own behaviour
(PID in the message, released on SIGKILL) is tested in tests/test_run_dir.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evolora.io import read_jsonl

TINY = [
    "--set",
    "model.name=tiny-random",
    "--set",
    "lora.rank=2",
    "--set",
    "selfplay.proposals_per_teacher=1",
    "--set",
    "selfplay.samples_per_problem=2",
    "--set",
    "selfplay.roles.teacher.max_new_tokens=4",
    "--set",
    "selfplay.roles.student.max_new_tokens=4",
    "--set",
    "eval.limit=0",
    "--set",
    "run.steps=1",
    "--set",
    "evolution.every=1",
]
CLI = [sys.executable, "-c", "from evolora.cli import app; app()"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
REPETITIONS = int(os.environ.get("EVOLORA_RACE_REPETITIONS", "3"))
"""Races per test in the suite (about 15 s each on 2 cores); the recorded proof runs 20 in a row:
``EVOLORA_RACE_REPETITIONS=20 pytest tests/test_faults_locks.py`` (docs/performance.md)."""


def assert_complete(run: Path, steps: int = 1) -> None:
    """A finished run: config, every step's metrics record once, matches of those steps only, final/."""
    assert (run / "config.yaml").is_file() and (run / "final" / "summary.json").is_file()
    metric_steps = [r["step"] for r in read_jsonl(run / "metrics.jsonl")]
    assert metric_steps == list(range(1, steps + 1)), metric_steps
    match_steps = {r["step"] for r in read_jsonl(run / "matches.jsonl")}
    assert match_steps <= set(range(1, steps + 1)), match_steps
    assert json.loads((run / "final" / "summary.json").read_text())["steps"] == steps
    assert not list(run.glob(".write-test*"))


def race(command: list[str]) -> list[tuple[int, str]]:
    """Start ``command`` twice at once; (exit code, output) of each."""
    procs = [
        subprocess.Popen([*CLI, *command], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    return [
        (proc.returncode, proc.communicate(timeout=300)[0]) if proc.wait(timeout=300) is not None else (-1, "")
        for proc in procs
    ]


def assert_one_writer(results: list[tuple[int, str]], rep: int) -> None:
    for code, output in results:
        flat = " ".join(output.split())
        assert "Traceback" not in output and "cannot write to output directory" not in flat, (
            f"rep {rep}: {output[-800:]}"
        )
        assert code == 0 or (code == 2 and ("is in use by process" in flat or "already holds a run" in flat)), (
            f"rep {rep}, exit {code}: {output[-800:]}"
        )
    assert any(code == 0 for code, _ in results), f"rep {rep}: neither finished"


@pytest.mark.slow
def test_two_evolve_processes_on_one_directory(tmp_path):
    for rep in range(REPETITIONS):
        out = tmp_path / f"run{rep}"
        results = race(["evolve", "tasks/gsm.yaml", "--out", str(out), "--no-eval", *TINY])
        assert_one_writer(results, rep)
        assert sum(code == 0 for code, _ in results) == 1, f"rep {rep}: both ran {[c for c, _ in results]}"
        assert_complete(out)


@pytest.mark.slow
def test_two_study_processes_on_one_directory(tmp_path):
    for rep in range(REPETITIONS):
        out = tmp_path / f"study{rep}"
        results = race(["study", "tasks/gsm.yaml", "--seeds", "0", "--arms", "population", "--out", str(out), *TINY])
        assert_one_writer(results, rep)
        runs = sorted(p.name for p in out.iterdir() if (p / "config.yaml").is_file())
        assert runs == ["population-s0"], runs
        assert_complete(out / "population-s0")


# -- the check under the lock, without a race ---------------------------------------------------
def finished(tmp_path: Path) -> Path:
    from typer.testing import CliRunner

    from evolora.cli import app

    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["evolve", "tasks/gsm.yaml", "--out", str(out), "--no-eval", *TINY])
    assert result.exit_code == 0, result.output
    return out


def digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def test_a_run_written_before_the_lock_is_taken_is_not_overwritten(tmp_path, single_thread):
    """What the losing process of a race sees: a run appeared after its own checks, before its lock."""
    import typer

    from evolora.cli.execute import _execute
    from evolora.config import load_config

    out = finished(tmp_path)
    before = digest(out)
    config = load_config("tasks/gsm.yaml", [TINY[i + 1] for i in range(0, len(TINY), 2)])
    with pytest.raises(typer.Exit) as exited:
        _execute(config, out, resume=False)  # evolve: refused
    assert exited.value.exit_code == 2
    assert _execute(config, out, resume=False, study=True) is None  # study: finished meanwhile, skipped
    assert digest(out) == before
