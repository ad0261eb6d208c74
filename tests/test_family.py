"""The family held-out set: the teachers' own problems, with numbers no teacher proposed (``eval.family``)."""

from __future__ import annotations

import json
import re

import pytest
from run_helpers import config_with

from evolora.report.verdict import run_verdict
from evolora.run import Run
from evolora.tasks.base import normalise_problem
from evolora.tasks.gsm import GSMTask
from evolora.tasks.gsm.family import family_items
from evolora.tasks.gsm.seeds import function_value, load_seeds, simple_seeds


def test_family_items_are_distinct_true_and_follow_the_teachers_seed_mix():
    seeds, simple = load_seeds(), simple_seeds()
    items, excluded = family_items(seeds, simple, simple_fraction=0.5, limit=60, seed=3)
    again, _ = family_items(seeds, simple, simple_fraction=0.5, limit=60, seed=3)
    assert items == again and excluded == 0 and len(items) == 60
    assert len({normalise_problem(i.question) for i in items}) == 60
    assert all(i.answer > 0 and i.answer == int(i.answer) for i in items)
    assert 15 <= sum(i.group == "simple" for i in items) <= 45  # about half, as the teachers draw them
    only_simple, _ = family_items(seeds, simple, simple_fraction=1.0, limit=20, seed=3)
    assert {i.group for i in only_simple} == {"simple"}
    seed = simple[0]  # an item's answer is its seed's function on the numbers its text states
    for item in family_items([], [seed], simple_fraction=1.0, limit=5, seed=1)[0]:
        numbers = [float(n) for n in re.findall(r"\d+(?:\.\d+)?", item.question.replace(",", ""))]
        assert function_value(seed.function, numbers) == item.answer


def test_a_proposed_problem_is_never_a_family_item_and_is_counted():
    task = GSMTask(proposal="numbers", simple_fraction=1.0)
    items, _ = task.family_held_out(10, 0, set())
    proposed = {normalise_problem(items[0].question), normalise_problem(items[3].question)}
    kept, excluded = task.family_held_out(10, 0, proposed)
    assert excluded == 2 and len(kept) == 10
    assert not {normalise_problem(i.question) for i in kept} & proposed
    assert kept[:2] == [items[1], items[2]]
    assert GSMTask(proposal="free").family_held_out(10, 0, set()) is None


def test_family_items_refuse_bad_arguments():
    with pytest.raises(ValueError, match="limit >= 0"):
        family_items(load_seeds(), [], simple_fraction=0.0, limit=-1, seed=0)
    with pytest.raises(ValueError, match="simple_fraction"):
        family_items(load_seeds(), [], simple_fraction=1.5, limit=1, seed=0)
    with pytest.raises(ValueError, match="at least one seed"):
        family_items([], [], simple_fraction=0.0, limit=1, seed=0)


def test_a_run_reports_the_family_beside_the_held_out_set(tmp_path, single_thread):
    config = config_with(
        task={"name": "gsm", "params": {"proposal": "numbers", "simple_fraction": 1.0}},
        eval={"limit": 2, "family": 3, "max_new_tokens": 4},
        run={"steps": 1},
    )
    run = Run(config, tmp_path / "run")
    first = run.task.family_held_out(1, 0, set())[0][0]
    run.memory.answers[normalise_problem(first.question)] = first.answer  # as if a teacher had proposed it
    summary = run.finish()
    family = summary["held_out_family"]
    assert family["items"] == 3 and family["excluded"] == 1 and "no teacher proposed" in family["source"]
    assert set(family["held_out"]) == set(summary["held_out"])  # the same members and the base
    answers = [json.loads(a) for a in (tmp_path / "run" / "final" / "held_out_family.jsonl").read_text().splitlines()]
    assert first.question not in {a["question"] for a in answers} and len(answers) == 3 * len(family["held_out"])
    verdict = run_verdict(summary, [])
    assert verdict["family"]["sentence"].startswith(f"On {family['source']}: ")
    assert verdict["sentence"].startswith(f"On {summary['held_out_source']}: ")  # each set labelled
    assert verdict["family"]["held_out"]["base"]["n"] == 3
    run.close()


def test_without_family_the_summary_has_no_family_key(tmp_path, single_thread):
    run = Run(config_with(task={"name": "arith", "params": {}}, eval={"family": 5}, run={"steps": 1}), tmp_path / "r")
    summary = run.finish()  # arith has no family set: nothing is drawn, nothing recorded
    assert "held_out_family" not in summary and "family" not in run_verdict(summary, [])
    run.close()


def test_eval_limit_zero_turns_the_family_off_too(tmp_path, single_thread):
    config = config_with(
        task={"name": "gsm", "params": {"proposal": "numbers", "simple_fraction": 1.0}},
        eval={"limit": 0, "family": 3},
        run={"steps": 1},
    )
    run = Run(config, tmp_path / "run")
    assert "held_out_family" not in run.finish()
    run.close()
