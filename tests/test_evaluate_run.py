"""Re-evaluating a finished run's adapters reproduces the run's own held-out numbers."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from evolora.cli import app
from evolora.evaluation.rerun import evaluate_run
from evolora.model import load_base
from evolora.population import AdapterBank
from run_helpers import finished_arith_run


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
    assert again == first  # same adapters, same items, greedy
    model, tokenizer = load_base("tiny-random")
    more = evaluate_run(tmp_path, limit=6, model=model, tokenizer=tokenizer)
    assert all(r["total"] == 6 for r in more.values())
    summary = json.loads((tmp_path / "final" / "summary.json").read_text())
    assert summary["held_out"] == more and summary["held_out_previous"] == first
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
