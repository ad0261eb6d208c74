"""The common exam of an evolution event and the breeder's record: which problems sit the exam,
how members score, how children are rated, what each event records, and that a resumed run
records the same events."""

from __future__ import annotations

import math

import pytest
import torch
from run_helpers import config_with

from evolora.breeding import response_record, selection_record
from evolora.config.fitness import FitnessConfig
from evolora.evolution import Birth
from evolora.exam import DEV, Exam, ExamWindow, exam_fitness, exam_items, exam_scores
from evolora.operators.breeding import deviation, heritability, selection_differential, separating, solve_rates
from evolora.ratings import Ratings
from evolora.selfplay import GameRecord
from evolora.tasks.base import HeldOutItem


def _game(teacher: str, problem: str | None) -> GameRecord:
    return GameRecord(
        teacher=teacher,
        student="s0",
        proposal_text=str(problem),
        problem=problem,
        program=None,
        valid=problem is not None,
        reason="ok" if problem else "parse",
        answer=1.0 if problem else None,
    )


def test_breeders_equation_by_hand():
    values = torch.tensor([0.2, 0.4, 0.6, 0.8], dtype=torch.float64)  # role mean 0.5
    assert selection_differential(values, torch.tensor([3, 3, 2])) == pytest.approx((0.8 + 0.8 + 0.6) / 3 - 0.5)
    assert deviation(values, torch.tensor([0, 1])) == pytest.approx(-0.2)
    assert math.isnan(selection_differential(values, torch.tensor([], dtype=torch.int64)))
    assert heritability(0.1, 0.2) == pytest.approx(0.5) and math.isnan(heritability(0.1, 0.0))
    with pytest.raises(ValueError, match="parent indices"):
        selection_differential(values, torch.tensor([4]))
    outcomes = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 1], [1, 0, 0, 0]])
    assert solve_rates(outcomes).tolist() == pytest.approx([0.5, 0.5, 0.25])
    assert separating(outcomes).tolist() == [False, True, False, True]  # all solve / none solve do not separate


def test_exam_takes_the_newest_distinct_problems_in_turn_from_each_teacher_then_the_dev_set():
    window = ExamWindow()
    window.add(1, [_game("t0", "1 + 1"), _game("t0", "2 + 2"), _game("t1", None), _game("t1", "3 + 3")])
    window.add(2, [_game("t0", "4 + 4"), _game("t1", "1+1"), _game("t1", "5 + 5")])
    dev = [HeldOutItem("9 + 9", 18.0), HeldOutItem("5 + 5", 10.0)]
    items, sources = exam_items(window, dev, FitnessConfig(name="exam", problems=4, size=2))
    assert [i.question for i in items] == [
        "5 + 5",
        "4 + 4",
        "1+1",
        "2 + 2",
        "9 + 9",
    ]  # t1, t0, t1, t0; dev "5 + 5" seen
    assert sources == ["t1", "t0", "t1", "t0", DEV]
    no_top_up, _ = exam_items(window, dev, FitnessConfig(name="exam", problems=2, top_up=False))
    assert [i.question for i in no_top_up] == ["5 + 5", "4 + 4"]
    restored = ExamWindow()
    restored.load_state_dict(window.state_dict())
    assert restored.entries == window.entries and restored.proposals("t1") == 4
    window.clear()
    assert exam_items(window, None, FitnessConfig(name="exam")) == ([], [])


def test_exam_scores_students_by_accuracy_and_teachers_by_valid_separating_share():
    window = ExamWindow()
    window.add(1, [_game("t0", "a"), _game("t0", "b"), _game("t1", "c"), _game("t1", None)])
    items = [HeldOutItem(q, 1.0) for q in ("a", "b", "c", "d")]
    outcomes = torch.tensor([[1.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]])  # a: both; b, c: one; d (dev): one
    exam = Exam(items, ["t0", "t0", "t1", DEV], ["s0", "s1"], outcomes, torch.tensor([[-1.0] * 4, [-2.0] * 4]))
    scores = exam_scores(exam, window, ["t0", "t1"])
    assert scores["accuracy"] == {"s0": 0.75, "s1": 0.5} and scores["dev"] == {"s0": 1.0, "s1": 0.0}
    assert scores["logprob"] == {"s0": -1.0, "s1": -2.0}
    assert scores["separation"] == {"t0": pytest.approx(0.5), "t1": pytest.approx(0.5)}  # 2/2 valid × 1/2; 1/2 × 1/1
    roles = {"t0": "teacher", "t1": "teacher", "s0": "student", "s1": "student", "c0": "critic"}
    rating = {m: 7.0 for m in roles}
    fitness = exam_fitness(FitnessConfig(name="exam", score="logprob"), roles, rating, scores, "student", "teacher")
    assert fitness == {"t0": 0.5, "t1": 0.5, "s0": -1.0, "s1": -2.0, "c0": 7.0}
    assert exam.to_dict()["outcomes"] == {"s0": "1101", "s1": "1010"}


def test_a_child_inherits_its_parents_rating_as_they_stood_before_the_event():
    ratings = Ratings()
    for member in ("s0", "s1"):
        ratings.add(member)
    ratings.record_match("s0", "s1", 1.0)  # s0 up, s1 down (student and teacher sides alike)
    before = Ratings.from_state_dict(ratings.state_dict())
    ratings.remove("s1")  # a parent replaced earlier in the same event
    ratings.add("s2", parents=("s0", "s1"), source=before)
    assert ratings.mu("s2") == pytest.approx((before.mu("s0") + before.mu("s1")) / 2)
    assert ratings.sigma("s2") == pytest.approx((before.sigma("s0") + before.sigma("s1")) / 2)
    assert ratings.sigma("s2") < ratings.config.sigma0 and ratings.elo("s2") == pytest.approx(1000.0)
    with pytest.raises(KeyError):
        ratings.add("s3", parents=("s1",))  # not rated here any more


def test_selection_and_response_records_by_hand():
    members = {
        "s0": {"role": "student", "fitness": 0.9, "held_out": 0.5},
        "s1": {"role": "student", "fitness": 0.5, "held_out": 0.3},
        "s2": {"role": "student", "fitness": 0.1, "held_out": 0.1},
        "t0": {"role": "teacher", "fitness": 0.0},
    }
    births = [Birth(5, "student", "s2", "s3", ("s0",), "lowrank_gaussian")]
    selection = selection_record(members, births)
    student = selection["student"]
    assert (student["parents"], student["replaced"], student["children"]) == (["s0"], ["s2"], ["s3"])
    assert student["differential"]["fitness"] == pytest.approx(0.4)
    assert student["differential"]["held_out"] == pytest.approx(0.2)
    assert student["replaced_deviation"]["fitness"] == pytest.approx(-0.4) and "teacher" not in selection
    now = {
        "s0": {"role": "student", "fitness": 0.6},
        "s1": {"role": "student", "fitness": 0.6},
        "s3": {"role": "student", "fitness": 0.9},
    }
    response = response_record({"step": 5, "selection": selection}, 10, now)["student"]
    assert response["response"]["fitness"] == pytest.approx(0.2)
    assert response["heritability"]["fitness"] == pytest.approx(0.5) and response["gain"]["fitness"] == pytest.approx(
        0.6
    )
    assert "held_out" not in response["response"]  # not measured now


def test_exam_fitness_config_and_an_exam_without_a_dev_set():
    exam = config_with(evolution={"fitness": {"name": "exam", "problems": 8, "score": "logprob"}}).evolution
    assert (exam.fitness.problems, exam.fitness.score, exam.fitness.needs_dev_set) == (8, "logprob", True)
    assert exam.child_rating == "inherit" and exam.audit == 0
    assert not config_with(evolution={"fitness": {"name": "exam", "top_up": False}}).evolution.fitness.needs_dev_set
    from evolora.config import ConfigError

    for bad in ({"name": "exam", "score": "pass@k"}, {"name": "exam", "problems": 0}):
        with pytest.raises(ConfigError, match="evolution.fitness"):
            config_with(evolution={"fitness": bad})
    with pytest.raises(ConfigError, match="child_rating"):
        config_with(evolution={"child_rating": "young"})


def test_every_event_records_the_exam_and_the_breeders_equation_and_resume_replays_it(tmp_path, single_thread):
    from evolora.run import Run

    config = config_with(
        evolution={"every": 1, "audit": 3, "fitness": {"name": "exam", "problems": 4, "size": 3}},
        task={"name": "arith", "params": {}},
        run={"steps": 3, "checkpoint_every": 1},
    )
    run = Run(config, tmp_path / "full")
    records = [run.run_step()[0] for _ in range(2)]
    first, second = records
    assert first["fitness"]["name"] == "exam" and len(first["fitness"]["exam"]["questions"]) >= 3
    assert set(first["fitness"]["exam"]["outcomes"]) == {"s0", "s1"}
    for entry in first["fitness"]["members"].values():
        assert ("accuracy" in entry and "held_out" in entry) == (entry["role"] == "student")
    assert first["evolution"]["response"] is None and set(first["evolution"]["selection"]) == {"teacher", "student"}
    assert second["evolution"]["response"]["of_step"] == 1
    run.save_checkpoint()
    resumed = Run(config, tmp_path / "part")
    resumed.run_step()
    resumed.save_checkpoint()
    again = Run(config, tmp_path / "part")
    assert again.load_checkpoint() and again.last_event is not None
    third, _ = again.run_step()
    assert third["evolution"] == second["evolution"] and third["fitness"] == second["fitness"]
