"""``eval.members``: every student, or only the fittest one (chosen without the held-out items)."""

from __future__ import annotations

import json

import pytest
from run_helpers import config_with

from evolora.evaluation.members import fittest
from evolora.evaluation.rerun import evaluate_run
from evolora.model import load_base
from evolora.report.verdict import run_verdict
from evolora.run import Run


def test_fittest_takes_the_highest_fitness_and_the_first_of_a_tie():
    record = {"members": {"s0": {"fitness": 1.0}, "s1": {"fitness": 3.0}, "s2": {"fitness": 3.0}}}
    assert fittest(record, ["s0", "s1", "s2"]) == "s1"
    assert fittest(record, ["s2", "s1"]) == "s2"
    assert fittest(record, ["s0"]) == "s0"
    with pytest.raises(ValueError, match="no members"):
        fittest(record, [])


def _finished(tmp_path, name, members):
    config = config_with(eval={"members": members}, task={"name": "arith", "params": {}}, run={"steps": 1})
    run = Run(config, tmp_path / name)
    run.train([])
    return run, run.finish()


def test_fittest_evaluates_one_student_chosen_by_fitness_with_the_same_answers(tmp_path, single_thread):
    _, every = _finished(tmp_path, "all", "all")
    run, summary = _finished(tmp_path, "fittest", "fittest")
    students = [m.id for m in run.population.role("student")]
    chosen = max(students, key=lambda m: summary["fitness"]["members"][m]["fitness"])
    assert set(summary["held_out"]) == {"base", chosen} and set(every["held_out"]) == {"base", *students}
    assert summary["held_out_members"] == "fittest" and every["held_out_members"] == "all"
    assert summary["held_out"][chosen]["items"] == every["held_out"][chosen]["items"]  # same run, same adapter
    answers = (tmp_path / "fittest" / "final" / "held_out.jsonl").read_text().splitlines()
    assert {json.loads(a)["member"] for a in answers} == {"base", chosen}
    assert [i["held_out"] is None for i in summary["individuals"] if i["role"] == "student"].count(True) == 1
    assert run_verdict(summary, [])["sentence"].startswith(
        f"The fittest student ({chosen}, chosen by the run's fitness"
    )
    assert "chosen on these problems" in run_verdict(every, [])["sentence"]


def test_a_rerun_under_fittest_evaluates_the_fittest_and_drops_the_others_numbers(tmp_path, single_thread):
    _, every = _finished(tmp_path, "all", "all")
    model, tokenizer = load_base("tiny-random")
    held = evaluate_run(
        tmp_path / "all", model=model, tokenizer=tokenizer, overrides=["eval.members=fittest"], out=tmp_path / "again"
    )
    fitness = every["fitness"]["members"]
    chosen = max((m for m in every["held_out"] if m != "base"), key=lambda m: fitness[m]["fitness"])
    assert set(held) == {"base", chosen}
    summary = json.loads((tmp_path / "again" / "final" / "summary.json").read_text())
    assert summary["held_out_members"] == "fittest"
    assert {i["id"]: i["held_out"] is not None for i in summary["individuals"] if i["role"] == "student"} == {
        m: m == chosen for m in every["held_out"] if m != "base"
    }
