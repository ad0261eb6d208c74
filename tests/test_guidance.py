"""Off-policy guidance: a verified reference answer joins the unsolved students' GRPO groups."""

from __future__ import annotations

import doctest
import random

import numpy as np
import pytest
import torch
from bank_helpers import rated_pair
from hypothesis import given, settings
from hypothesis import strategies as st

import evolora.selfplay.guidance
from evolora.config import ConfigError, SelfPlayConfig, config_from_dict
from evolora.generation.rollout import Completion
from evolora.learner import compute_advantages
from evolora.metrics import operator_count
from evolora.selfplay import play_step
from evolora.tasks.arith import ArithTask
from evolora.tasks.arith.evaluate import evaluate_expression
from evolora.tasks.arith.steps import reduction_steps, worked_answer
from evolora.tasks.arith.text import random_expression


def _step(tiny, monkeypatch, guidance: str):
    """One step, 1 teacher + 1 student: proposals 2 + 2 (solved 1/2) and 3 * 4 (unsolved)."""
    tokenizer = tiny[1]
    bank, teachers, students, ratings = rated_pair(tiny[0], tokenizer=tiny[1])
    answers = iter(["4", "5", "11", "13"])

    def fake_rollout(prompts, adapters, sampling, **kwargs):
        if sampling.max_new_tokens == 9:
            return [Completion(a, tuple(p), (5,), t, False) for p, a, t in zip(prompts, adapters, [" 2 + 2", " 3 * 4"])]
        return [Completion(a, tuple(p), (6, 7), next(answers), False) for p, a in zip(prompts, adapters)]

    monkeypatch.setattr(bank, "rollout", fake_rollout)
    config = SelfPlayConfig(
        proposals_per_teacher=2, samples_per_problem=2, roles={"teacher": {"max_new_tokens": 9}}, guidance=guidance
    )
    outcome = play_step(
        bank,
        tokenizer,
        ArithTask(),
        teachers,
        students,
        ratings,
        config,
        rng=random.Random(0),
        np_rng=np.random.default_rng(0),
    )
    return outcome, tokenizer, students[0].id, teachers[0].id


@pytest.mark.parametrize(
    "guidance, guided", [("none", [False, False]), ("unsolved", [False, True]), ("all", [True, True])]
)
def test_reference_joins_only_the_groups_it_should(tiny, monkeypatch, guidance, guided):
    outcome, tokenizer, student, teacher = _step(tiny, monkeypatch, guidance)
    games = outcome.games
    assert [g.guided for g in games] == guided
    samples = outcome.samples[student]
    assert len(samples) == 4 + sum(guided)
    references = samples[4:]
    expected = [f"{g.problem} = {int(g.answer)}" for g, on in zip(games, guided) if on]
    assert [tokenizer.decode(s.completion_ids, skip_special_tokens=True) for s in references] == expected
    assert all(s.completion_ids[-1] == tokenizer.eos_token_id and s.reward == 1.0 for s in references)
    for s in references:  # same prompt and group as the sampled attempts of its problem
        twin = next(x for x in samples[:4] if x.group == s.group)
        assert s.prompt_ids == twin.prompt_ids
    # the honest side is untouched: ŝ, teacher rewards and the recorded attempts see samples only
    assert [g.solve_rate for g in games] == [0.5, 0.0]
    assert [g.attempts for g in games] == [["4", "5"], ["11", "13"]]
    assert [s.reward for s in outcome.samples[teacher]] == pytest.approx([0.5, 0.0])


@pytest.mark.parametrize("guidance, nonzero", [("none", False), ("unsolved", True)])
def test_unsolved_group_gets_a_gradient_only_with_guidance(tiny, monkeypatch, guidance, nonzero):
    outcome, _, student, _ = _step(tiny, monkeypatch, guidance)
    group = [s for s in outcome.samples[student] if s.group == "problem1"]
    advantages = compute_advantages(torch.tensor([s.reward for s in group]), [s.group for s in group]).tolist()
    assert any(abs(a) > 1e-6 for a in advantages) is nonzero
    if nonzero:
        assert advantages[-1] > 0 > advantages[0]  # the reference up, the wrong attempts down


def test_guidance_needs_a_task_with_reference_solutions():
    with pytest.raises(ConfigError, match="selfplay.guidance: task 'gsm' writes no reference"):
        config_from_dict({"task": {"name": "gsm"}, "selfplay": {"guidance": "unsolved"}})
    with pytest.raises(ConfigError, match="selfplay.guidance"):
        config_from_dict({"selfplay": {"guidance": "sometimes"}})
    assert config_from_dict({"task": {"name": "arith"}, "selfplay": {"guidance": "all"}}).selfplay.guidance == "all"
    with pytest.raises(ValueError, match="unknown guidance"):
        evolora.selfplay.guidance.wants_guidance("often", 0.0)


def test_arith_reference_solution_grades_correct():
    task = ArithTask()
    for problem, answer in (("8 + 5 + 4", 17.0), ("7 / 2", 3.5), ("3 - 10", -7.0)):
        text = task.reference_solution(problem, answer)
        assert text.startswith(problem) and task.grade(text, answer).label == "correct"
    assert doctest.testmod(evolora.selfplay.guidance).failed == 0


WIDE = dict(max_value=2**53, max_digits=20)  # intermediate values may outgrow a problem's limits


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10**6), digits=st.integers(1, 3), ops=st.integers(1, 4))
def test_reduction_steps_remove_one_operator_each_and_end_at_the_value(seed, digits, ops):
    problem = random_expression(random.Random(seed), digits, ops)
    steps = reduction_steps(problem)
    assert len(steps) == operator_count(problem) == ops
    for before, after in zip([problem, *steps], steps):
        assert operator_count(after) == operator_count(before) - 1
        assert evaluate_expression(after, **WIDE) == evaluate_expression(before, **WIDE)
    assert worked_answer(problem, float(evaluate_expression(problem, **WIDE))) == " = ".join([problem, *steps])


def test_reduction_keeps_precedence_of_negative_values():
    assert reduction_steps("4 - (1 - 4) ** 2") == ["4 - (-3) ** 2", "4 - 9", "-5"]
    assert reduction_steps("5 - (0 - 3)") == ["5 - -3", "8"]
    assert worked_answer("(1 - 4) ** 2", 9.0) == "(1 - 4) ** 2 = (-3) ** 2 = 9"
    assert worked_answer("7 - 1", 5.0) == "7 - 1 = 5"  # a chain that misses the answer: the short form
    with pytest.raises(ValueError, match="cannot reduce"):
        reduction_steps("1 / (2 - 2)")
