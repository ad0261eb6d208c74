"""Fault classes "locks" and "--out" for the commands that write after a run: ``evaluate`` (greedy
and sampled), ``export`` and ``report``.

* Each takes a lock before it reads or writes: ``evaluate`` and ``export`` the run directory's (held
  from the first read of ``final/`` to the last write, so a resume never changes the adapters or
  the summary under them), ``report`` its own report folder's (it writes nothing else, so a run in
  progress can be reported). Another process holding the lock gets exit 2 with its PID, and
  nothing is written.
* ``--out`` never writes into another run: an existing file, or a directory holding a run's files,
  is refused (exit 2, one line naming it) before any model loads, for ``evolve``, ``evaluate``,
  ``report``, ``compare`` and ``study``.

The lock itself (PID, released on SIGKILL) is tested in tests/test_run_dir.py, the evolve and study
races in tests/test_faults_locks.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from run_helpers import TOY_ARGS, finished_cli_run, tree_digest
from typer.testing import CliRunner

from evolora.cli import app
from evolora.run_dir import OutRefused, check_out

runner = CliRunner()
CLI = [sys.executable, "-c", "from evolora.cli import app; app()"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
REPETITIONS = int(os.environ.get("EVOLORA_RACE_REPETITIONS", "3"))


@pytest.fixture(scope="module")
def finished(tmp_path_factory, single_thread) -> Path:
    """A finished 2-step toy run on the tiny model (read-only: tests copy it before writing)."""
    return finished_cli_run(tmp_path_factory.mktemp("writers") / "run")


@pytest.fixture
def run(finished, tmp_path) -> Path:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


@contextmanager
def held_by_another_process(directory: Path):
    """A separate process holding ``directory``'s lock for the ``with`` block; yields its PID."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import time; from evolora.run_dir import lock_run_dir\n"
                f"with lock_run_dir({str(directory)!r}):\n    print('held', flush=True); time.sleep(120)"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def invoke(*args: str):
    result = runner.invoke(app, [str(a) for a in args])
    return result, " ".join(result.output.split())


@pytest.fixture
def no_model(monkeypatch):
    """Loading a base model fails the test: refusals come before any work."""
    import evolora.model

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(evolora.model, "load_base", refuse)


# -- locks ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "command",
    [["evaluate"], ["evaluate", "--samples", "2", "--k", "1"], ["export", "--no-merge"], ["export"]],
    ids=["evaluate", "evaluate-sampled", "export-adapter", "export-merged"],
)
def test_a_writer_refuses_a_run_another_process_holds_and_writes_nothing(command, run, no_model):
    before = tree_digest(run)
    with held_by_another_process(run) as pid:
        result, flat = invoke(command[0], run, *command[1:])
    assert result.exit_code == 2, result.output
    assert f"is in use by process {pid}" in flat and "Traceback" not in result.output
    assert tree_digest(run) == before and not (run / "export").exists()


def test_evaluate_with_out_also_locks_its_record_directory(run, tmp_path, no_model):
    record = tmp_path / "record"
    with held_by_another_process(record) as pid:
        result, flat = invoke("evaluate", run, "--out", record)
    assert result.exit_code == 2 and f"is in use by process {pid}" in flat, result.output
    assert sorted(p.name for p in record.iterdir()) == [".lock"]


def test_report_locks_its_own_folder_and_reports_a_run_in_progress(run):
    with held_by_another_process(run / "report") as pid:
        result, flat = invoke("report", run)
    assert result.exit_code == 2 and f"is in use by process {pid}" in flat, result.output
    assert not (run / "report" / "report.html").exists()
    with held_by_another_process(run):  # a run in progress: report reads it and writes only report/
        result, _ = invoke("report", run)
    assert result.exit_code == 0, result.output
    assert (run / "report" / "report.html").is_file()


def test_the_lock_is_released_after_a_command(run, tmp_path):
    from evolora.run_dir import lock_run_dir

    result, _ = invoke("export", run, "--no-merge", "--out", tmp_path / "adapter")
    assert result.exit_code == 0, result.output
    with lock_run_dir(run):
        pass


@pytest.mark.slow
def test_evaluate_overlapping_a_resume_never_writes_an_older_summary(finished, tmp_path):
    """An ``evaluate`` and a resume to 3 steps started at once: one waits its turn or is refused;
    whatever the order, a resume that finished leaves a step-3 summary and steps 1..3 once each."""
    import shutil

    from evolora.io import read_jsonl

    for rep in range(REPETITIONS):
        run = tmp_path / f"run{rep}"
        shutil.copytree(finished, run)
        commands = [["evolve", "--resume", str(run), "--set", "run.steps=3"], ["evaluate", str(run)]]
        procs = [
            subprocess.Popen([*CLI, *c], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for c in commands
        ]
        results = [(proc.communicate(timeout=300)[0], proc.returncode) for proc in procs]
        for output, code in results:
            flat = " ".join(output.split())
            assert "Traceback" not in output, f"rep {rep}: {output[-800:]}"
            assert code == 0 or (code == 2 and "is in use by process" in flat), f"rep {rep}: {output[-800:]}"
        summary = json.loads((run / "final" / "summary.json").read_text())
        if results[0][1] == 0:
            assert summary["steps"] == 3, f"rep {rep}: the summary of step {summary['steps']} won"
            assert [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3]


# -- --out ----------------------------------------------------------------------------------------
def test_check_out_refuses_a_file_and_a_run_and_accepts_a_new_or_unrelated_directory(run, tmp_path):
    (tmp_path / "file.txt").write_text("mine")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("mine")
    with pytest.raises(OutRefused, match="file.txt is an existing file"):
        check_out(tmp_path / "file.txt")
    with pytest.raises(OutRefused, match=r"holds another run's files \(config.yaml\)"):
        check_out(run)
    assert check_out(tmp_path / "new") == tmp_path / "new" and not (tmp_path / "new").exists()
    assert check_out(tmp_path / "notes") == tmp_path / "notes"


def test_evaluate_out_into_another_run_is_refused_before_any_work(run, finished, tmp_path, no_model):
    other = tmp_path / "other"
    import shutil

    shutil.copytree(finished, other)
    before, mine = tree_digest(other), tree_digest(run)
    result, flat = invoke("evaluate", run, "--out", other)
    assert result.exit_code == 2, result.output
    assert f"--out {other} holds another run's files (config.yaml)" in flat
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert tree_digest(other) == before and tree_digest(run) == mine


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "{run}", "--out", "{out}"],
        ["report", "{run}", "--out", "{out}"],
        ["compare", "{run}", "{run}", "--out", "{out}"],
        ["evolve", "tasks/gsm.yaml", "--out", "{out}", *TOY_ARGS],
        ["study", "tasks/gsm.yaml", "--seeds", "0", "--arms", "population", "--out", "{out}", *TOY_ARGS],
    ],
    ids=["evaluate", "report", "compare", "evolve", "study"],
)
def test_out_naming_an_existing_file_is_refused_in_one_line(command, run, tmp_path, no_model):
    out = tmp_path / "taken.txt"
    out.write_text("keep me")
    result, flat = invoke(*(part.replace("{run}", str(run)).replace("{out}", str(out)) for part in command))
    assert result.exit_code == 2, result.output
    assert f"--out {out} is an existing file" in flat, flat
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
    assert out.read_text() == "keep me"


@pytest.mark.parametrize(
    "command",
    [
        ["report", "{run}", "--out", "{other}"],
        ["study", "tasks/gsm.yaml", "--seeds", "0", "--arms", "population", "--out", "{other}", *TOY_ARGS],
    ],
    ids=["report", "study"],
)
def test_report_and_study_out_into_a_run_are_refused(command, run, finished, tmp_path, no_model):
    import shutil

    other = tmp_path / "other"
    shutil.copytree(finished, other)
    before = tree_digest(other)
    result, flat = invoke(*(part.replace("{run}", str(run)).replace("{other}", str(other)) for part in command))
    assert result.exit_code == 2 and f"--out {other} holds another run's files" in flat, result.output
    assert tree_digest(other) == before


def test_evolve_out_into_a_started_run_is_refused(tmp_path, no_model):
    """A directory with only the config of another run (stopped before its first step) is a run too."""
    out = tmp_path / "started"
    out.mkdir()
    (out / "config.yaml").write_text("run: {steps: 1}\n")
    result, flat = invoke("evolve", "tasks/gsm.yaml", "--out", out, *TOY_ARGS)
    assert result.exit_code == 2, result.output
    assert f"{out} already holds a run (config.yaml); continue it with --resume" in flat
    assert (out / "config.yaml").read_text() == "run: {steps: 1}\n"


def test_evaluate_out_into_a_fresh_directory_writes_its_own_record(run, tmp_path):
    record = tmp_path / "record"
    mine = tree_digest(run)
    result, _ = invoke("evaluate", run, "--out", record)
    assert result.exit_code == 0, result.output
    assert (record / "final" / "summary.json").is_file() and (record / "config.yaml").is_file()
    assert tree_digest(run) == mine
    again, flat = invoke("evaluate", run, "--out", record)  # a record is a run's files: never overwritten
    assert again.exit_code == 2 and "holds another run's files" in flat
