"""Re-evaluating a finished run's adapters reproduces the run's own held-out numbers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from run_helpers import finished_arith_run
from typer.testing import CliRunner

from evolora.bank.local import AdapterBank
from evolora.cli import app
from evolora.evaluation.rerun import evaluate_run
from evolora.model import load_base


def test_load_adapter_round_trips_a_saved_adapter(tmp_path, single_thread):
    model, _ = load_base("tiny-random")
    bank = AdapterBank(model, ["A", "B"], rank=4, alpha=8, target_modules=("q_proj", "v_proj"))
    bank.init_factors("A", torch.Generator().manual_seed(0), b_std=0.1)
    bank.load_adapter("B", bank.save_adapter("A", tmp_path / "a"))
    saved, loaded = bank.get_factors("A"), bank.get_factors("B")
    assert all(torch.equal(saved[k][0], loaded[k][0]) and torch.equal(saved[k][1], loaded[k][1]) for k in saved)
    with pytest.raises(FileNotFoundError, match="adapter_model.safetensors"):
        bank.load_adapter("B", tmp_path)


@pytest.mark.parametrize("mode", ["population", "single_agent"])
def test_evaluate_run_reproduces_the_final_evaluation(tiny_config, tmp_path, single_thread, mode):
    run, first = finished_arith_run(tiny_config, tmp_path, mode)
    assert set(first) == {"base"} | {m.id for m in run.population.players(run.arm.game)[1]}
    assert len(first) == (2 if mode == "single_agent" else 3)
    answers = [json.loads(line) for line in (tmp_path / "final" / "held_out.jsonl").read_text().splitlines()]
    items = first["base"]["total"]
    assert len(answers) == len(first) * items
    for member, result in first.items():  # the arith grid's cells, counted apart, add up to the whole
        mine = [a for a in answers if a["member"] == member]
        assert [a["item"] for a in mine] == list(range(items))
        assert sum(a["grade"] == "correct" for a in mine) == result["correct"]
        groups = result["by_group"]
        assert sum(g["total"] for g in groups.values()) == items
        assert sum(g["correct"] for g in groups.values()) == result["correct"]
        assert {a["group"] for a in mine} == set(groups) and all(g.startswith("d") for g in groups)

    model, tokenizer = load_base("tiny-random")
    again = evaluate_run(tmp_path, model=model, tokenizer=tokenizer)
    assert "cached" not in first["base"] and again["base"]["cached"] is True  # the base's answers reused
    assert again == {**first, "base": {**first["base"], "cached": True}}  # same adapters, same items, greedy
    model, tokenizer = load_base("tiny-random")
    more = evaluate_run(tmp_path, limit=6, model=model, tokenizer=tokenizer)
    assert all(r["total"] == 6 for r in more.values()) and "cached" not in more["base"]  # other items: evaluated
    summary = json.loads((tmp_path / "final" / "summary.json").read_text())
    assert summary["held_out"] == more and summary["held_out_previous"] == again
    assert summary["held_out_eval"]["limit"] == 6
    member = next(i for i in summary["individuals"] if i["id"] in more and i["id"] != "base")
    assert member["held_out"] == more[member["id"]]


def test_evaluate_run_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.yaml does not exist"):
        evaluate_run(tmp_path)
    result = CliRunner().invoke(app, ["evaluate", str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and "does not exist" in result.output
    result = CliRunner().invoke(app, ["evaluate", str(tmp_path), "--limit", "0"])
    assert result.exit_code == 2


def test_evaluate_run_under_overrides_writes_a_new_record_and_keeps_the_run(tiny_config, tmp_path, single_thread):
    run_dir, grid = tmp_path / "run", tmp_path / "grid18"
    finished_arith_run(tiny_config, run_dir)
    (run_dir / "metrics.jsonl").write_text('{"step": 0, "solve_rate": 0.25}\n')  # the run here logs none
    before = {
        p: p.read_bytes()
        for p in (run_dir / "config.yaml", run_dir / "final" / "summary.json", run_dir / "final" / "held_out.jsonl")
    }
    with pytest.raises(ValueError, match="give --out DIR"):
        evaluate_run(run_dir, overrides=["task.params.eval_per_cell=2"])
    with pytest.raises(ValueError, match="the run directory itself"):
        evaluate_run(run_dir, out=run_dir)
    model, tokenizer = load_base("tiny-random")
    held_out = evaluate_run(
        run_dir, limit=18, overrides=["task.params.eval_per_cell=2"], out=grid, model=model, tokenizer=tokenizer
    )
    assert all(p.read_bytes() == raw for p, raw in before.items())  # the run's own record is untouched
    assert all(r["total"] == 18 and set(g["total"] for g in r["by_group"].values()) == {2} for r in held_out.values())
    assert len(held_out["base"]["by_group"]) == 9  # 3 digits x 3 operators, 2 problems each
    summary = json.loads((grid / "final" / "summary.json").read_text())
    assert summary["held_out"] == held_out and summary["held_out_eval"]["overrides"] == ["task.params.eval_per_cell=2"]
    assert "eval_per_cell: 2" in (grid / "config.yaml").read_text()
    assert (grid / "metrics.jsonl").read_bytes() == (run_dir / "metrics.jsonl").read_bytes()
    assert len((grid / "final" / "held_out.jsonl").read_text().splitlines()) == 18 * len(held_out)
    result = CliRunner().invoke(
        app, ["evaluate", str(run_dir), "--samples", "2", "--set", "eval.limit=3", "--out", str(tmp_path / "x")]
    )
    assert result.exit_code == 2 and "apply to greedy evaluation" in result.output


def test_study_reevaluate_script_writes_records_once_and_evaluates_the_base_once(tiny_config, tmp_path, single_thread):
    study, out = tmp_path / "study", tmp_path / "grid9"
    for name, mode in (("population-s0", "population"), ("single_agent-s0", "single_agent")):
        finished_arith_run(tiny_config, study / name, mode)
    command = [
        sys.executable,
        "benchmarks/study_reevaluate.py",
        str(study),
        "--out",
        str(out),
        "--set",
        "task.params.eval_per_cell=1",
        "--limit",
        "9",
    ]
    first = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "2 finished runs, 0 already re-evaluated" in first.stdout and "[2/2] single_agent-s0" in first.stdout
    summaries = {
        name: json.loads((out / name / "final" / "summary.json").read_text())
        for name in ("population-s0", "single_agent-s0")
    }
    assert all(s["held_out"]["base"]["total"] == 9 for s in summaries.values())
    assert summaries["population-s0"]["held_out"]["base"] == summaries["single_agent-s0"]["held_out"]["base"]
    assert summaries["single_agent-s0"]["held_out_eval"]["base_from"] == "population-s0"
    assert "base_from" not in summaries["population-s0"]["held_out_eval"]
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "2 finished runs, 2 already re-evaluated" in again.stdout
