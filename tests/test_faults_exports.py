"""Fault class "exports": a run finished, resumed for more steps and stopped before its new end
keeps ``final/`` from its first end while its checkpoints are newer. ``evolora export`` and
``evolora evaluate`` name the step of the adapters they read and refuse such an older
``final/`` (exit 2, naming both steps and the ways on) unless ``--stale-ok``, which proceeds with
a warning; a refusal writes nothing and changes nothing already written. Export's other
refusals live in tests/test_export.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from run_helpers import TOY_ARGS as TOY
from typer.testing import CliRunner

from evolora.cli import app
from evolora.run_dir import StaleFinal, final_step, finished_at

runner = CliRunner()


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, single_thread):
    out = tmp_path_factory.mktemp("stale") / "run"
    result = runner.invoke(app, ["evolve", "tasks/gsm.yaml", "--out", str(out), *TOY])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def stale_run(finished_run, tmp_path):
    """The finished 2-step run whose checkpoints reach step 4 (as a resume to 4 steps stopped after
    its step-4 checkpoint, before writing final/)."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    newest = sorted((run / "checkpoints").glob("step_*"))[-1]
    shutil.copytree(newest, run / "checkpoints" / "step_000004")
    return run


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    return result, " ".join(result.output.split())


def test_final_step_is_the_summary_step_unless_a_checkpoint_is_newer(finished_run, stale_run):
    summary = json.loads((finished_run / "final" / "summary.json").read_text())
    assert final_step(finished_run, summary) == 2
    with pytest.raises(StaleFinal, match="step 2, but the run's checkpoints reach step 4"):
        final_step(stale_run, summary)
    assert final_step(stale_run, summary, allow_stale=True) == 2
    with pytest.raises(ValueError, match="records no step"):
        final_step(stale_run, {"individuals": []})


def test_finished_at_only_for_a_summary_of_enough_steps_that_no_checkpoint_outruns(finished_run, stale_run, tmp_path):
    assert finished_at(finished_run, 2) == 2 and finished_at(finished_run, 1) == 2
    assert finished_at(finished_run, 3) is None  # a resume to 3 steps has work to do
    assert finished_at(stale_run, 2) is None  # a resume for more steps stopped before its new end
    assert finished_at(tmp_path, 1) is None  # no summary
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "summary.json").write_text("[1, 2")
    assert finished_at(tmp_path, 1) is None  # a damaged summary: the resume writes it again


@pytest.mark.parametrize("command", [["export", "--no-merge"], ["evaluate"], ["evaluate", "--samples", "2"]])
def test_stale_final_is_refused_and_nothing_changes(stale_run, command):
    before = tree_digest(stale_run)
    result, output = invoke(command[0], str(stale_run), *command[1:])
    assert result.exit_code == 2, output
    assert "final holds the adapters of step 2" in output and "checkpoints reach step 4" in output
    assert "--resume" in output and "--stale-ok" in output and "Traceback" not in output
    assert tree_digest(stale_run) == before
    assert not (stale_run / "export").exists()


def test_export_names_the_step_and_stale_ok_proceeds_with_a_warning(finished_run, stale_run, tmp_path):
    result, output = invoke("export", str(finished_run), "--no-merge", "--out", str(tmp_path / "fresh"))
    assert result.exit_code == 0, output
    assert "the adapter of step 2" in output and "warning" not in output
    result, output = invoke("export", str(stale_run), "--no-merge", "--stale-ok", "--out", str(tmp_path / "old"))
    assert result.exit_code == 0, output
    assert "the adapter of step 2" in output and "warning: the run's checkpoints reach step 4" in output
    assert (tmp_path / "old" / "adapter_model.safetensors").is_file()


def test_evaluate_names_the_step_and_records_it(stale_run):
    result, output = invoke("evaluate", str(stale_run), "--stale-ok", "--limit", "1")
    assert result.exit_code == 0, output
    assert "reading the adapters of step 2" in output and "checkpoints reach step 4" in output
    assert "adapters of step 2" in output
    summary = json.loads((stale_run / "final" / "summary.json").read_text())
    assert summary["held_out_eval"]["adapters_step"] == 2
