"""Whole, honest console output: a piped run prints its final table uncropped with intervals, the
trends and the verdict; a config error is at most 3 short lines, whatever the YAML holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from evolora.config import ConfigError, config_from_dict

TINY = [
    "--set",
    "model.name=tiny-random",
    "--set",
    "run.steps=2",
    "--set",
    "eval.limit=4",
    "--set",
    "selfplay.roles.teacher.max_new_tokens=8",
    "--set",
    "selfplay.roles.student.max_new_tokens=6",
]


@pytest.mark.slow
def test_a_piped_run_prints_the_whole_table_and_the_verdict(tmp_path):
    env = {**os.environ, "COLUMNS": "80", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "evolora.cli", "evolve", "tasks/arith.yaml", "--out", str(tmp_path / "run"), *TINY],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "held-out [95 %], n" in done.stdout and "n=4" in done.stdout and "…" not in done.stdout
    assert "in-run trend" in done.stdout and "from the base by" in done.stdout
    summary = json.loads((tmp_path / "run" / "final" / "summary.json").read_text())
    assert summary["verdict"]["held_out"]["base"]["n"] == 4 and "noise" in summary["verdict"]["sentence"]
    assert "…" not in done.stderr.splitlines()[0]  # the first line is not cut at 80 columns either


def test_the_final_table_prints_no_negative_zero():
    from evolora.report.stats import fixed  # the final table's formatter

    assert [fixed(value) for value in (-0.04, -0.05, -0.0, 0.04, 18.64)] == ["0.0", "-0.1", "0.0", "0.0", "18.6"]


@pytest.mark.parametrize("module", ["evolora", "evolora.cli"])
def test_python_dash_m_runs_the_command_line(module):
    done = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.split()[0]) == (0, "evolora"), done.stderr[-2000:]


def test_a_config_error_is_at_most_three_short_lines():
    hostile = {"model": {"name": 3, "dtype": "x" * 500, "extra": {"deep": list(range(1000))}}}
    with pytest.raises(ConfigError) as error:
        config_from_dict(hostile)
    lines = str(error.value).splitlines()
    assert len(lines) <= 3 and all(len(line) <= 160 for line in lines)
    assert "model.name" in lines[1] and "Traceback" not in str(error.value)
    with pytest.raises(ConfigError) as error:
        config_from_dict({"model": "tiny\n" * 1000})
    assert len(str(error.value).splitlines()) == 2 and str(error.value).endswith("...)")


@pytest.mark.parametrize(
    "override",
    [
        "lora.rank=4",
        "model.name=smollm2-135m-instruct",
        "population.teachers=3",
        "selfplay.mode=single_agent",
        "lora.target_modules=[q_proj]",
    ],
)
def test_a_refused_resume_leaves_the_run_directory_byte_for_byte(override, tmp_path, single_thread):
    import hashlib

    from typer.testing import CliRunner

    from evolora.cli import app

    runner, out = CliRunner(), tmp_path / "run"
    assert runner.invoke(app, ["evolve", "tasks/arith.yaml", "--out", str(out), "--no-eval", *TINY]).exit_code == 0
    digest = lambda: {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.rglob("*") if p.is_file()}  # noqa: E731
    before = digest()
    refused = runner.invoke(app, ["evolve", "--resume", str(out), "--set", override, "--set", "run.steps=3"])
    assert refused.exit_code == 2 and "cannot change" in refused.output and "Traceback" not in refused.output
    assert digest() == before
    assert runner.invoke(app, ["evolve", "--resume", str(out), "--set", "run.steps=3", "--no-eval"]).exit_code == 0
