"""The command line: config validation before any model loads, a tiny end-to-end run, resume."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from evolora.cli import app
from evolora.io import read_jsonl

runner = CliRunner()
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
]


def invoke(*args):
    began = time.perf_counter()
    result = runner.invoke(app, list(args))
    return result, time.perf_counter() - began


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("lora.rnak=4", "lora.rnak: unknown key"),
        ("lora.rank=abc", "lora.rank"),
        ("population.teachers=0", "population.teachers"),
        ("learner.algorithm=ppo", "learner.algorithm"),
        ("evolution.gamma=1.5", "evolution.gamma"),
        ("evolution.mutation.name=gausian", "unknown mutation 'gausian'"),
        ("evolution.mutation.params={sigam: 1}", "unknown parameter 'sigam'"),
        ("task.name=chess", "unknown task 'chess'"),
        ("task.params.num_exmaples=3", "num_exmaples"),
        ("evolution.elitism=5", "evolution.elitism"),
        ("task.params.timeout_s=-1", "timeout_s > 0"),
        ("task.params.eval_path=/no/such/test.jsonl", "/no/such/test.jsonl"),
    ],
)
def test_bad_config_fails_fast_naming_the_key(override, message, tmp_path):
    result, seconds = invoke("evolve", "tasks/gsm.yaml", "--out", str(tmp_path / "r"), "--set", override)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert seconds < 5
    assert not (tmp_path / "r" / "config.yaml").exists()  # nothing written, no model loaded


def test_unreadable_config_and_malformed_yaml(tmp_path):
    result, _ = invoke("evolve", str(tmp_path / "missing.yaml"))
    assert result.exit_code == 2 and "cannot read config" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("run: [steps: 3\n")
    result, _ = invoke("evolve", str(bad))
    assert result.exit_code == 2 and "not valid YAML" in result.output


def test_missing_model_path_names_it(tmp_path):
    result, seconds = invoke(
        "evolve", "tasks/gsm.yaml", "--out", str(tmp_path / "r"), "--set", f"model.name={tmp_path / 'nowhere'}"
    )
    assert result.exit_code == 2 and "nowhere" in result.output and seconds < 5


def test_tiny_cli_run_then_resume(tmp_path):
    out = tmp_path / "run"
    result, _ = invoke("evolve", "tasks/gsm.yaml", "--out", str(out), *TINY, "--set", "run.steps=1")
    assert result.exit_code == 0, result.output
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1]
    # a second plain run into the same directory is refused; --resume continues it
    result, _ = invoke("evolve", "tasks/gsm.yaml", "--out", str(out), *TINY)
    assert result.exit_code == 2 and "--resume" in result.output
    result, _ = invoke("evolve", "--resume", str(out), "--set", "run.steps=2")
    assert result.exit_code == 0, result.output
    assert "resumed at step 1" in result.output
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]
    summary = json.loads((out / "final" / "summary.json").read_text())
    assert summary["steps"] == 2 and len(summary["individuals"]) == 4
    for row in summary["individuals"]:
        assert (out / "final" / row["id"] / "adapter_model.safetensors").exists()
    # a resume of the finished run loads nothing and leaves final/ as it is
    written = (out / "final" / "summary.json").stat().st_mtime_ns
    result, seconds = invoke("evolve", "--resume", str(out))
    assert result.exit_code == 0, result.output
    assert "has finished its 2 steps" in " ".join(result.output.split()) and seconds < 10
    assert (out / "final" / "summary.json").stat().st_mtime_ns == written


def test_operators_listing_names_every_kind():
    result, _ = invoke("operators")
    assert result.exit_code == 0
    for name in ("tournament", "svd_merge", "lowrank_gaussian", "pbt_truncation"):
        assert name in result.output
    assert "`" not in result.output and "num independent times" in result.output  # no reST ``num``


def test_toy_task_runs_every_phase_from_the_cli(tmp_path):
    out = tmp_path / "toy"
    result, _ = invoke(
        "evolve", "tasks/gsm.yaml", "--out", str(out), *TINY, "--set", "task.name=toy", "--set", "task.params={}"
    )
    assert result.exit_code == 0, result.output
    records = read_jsonl(out / "metrics.jsonl")
    assert all(r["validity_rate"] == 1.0 for r in records)
    assert all(r["solve_rate"] is not None for r in records)
