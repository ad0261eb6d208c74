"""Per-role sampling keys and the repetition rule against degenerate teachers."""

from __future__ import annotations

import random

import numpy as np
import pytest
from bank_helpers import rated_pair

from evolora.config import ConfigError, RewardConfig, SelfPlayConfig, config_from_dict
from evolora.generation.rollout import Completion
from evolora.generation.types import Sampling
from evolora.selfplay import play_step, repetition_penalties, teacher_reward
from evolora.tasks.arith import ArithTask
from evolora.tasks.base import ProposalRequest, normalise_problem


def test_sampling_keys_fall_back_per_role():
    config = SelfPlayConfig(
        temperature=0.9, top_p=0.95, roles={"teacher": {"max_new_tokens": 7}, "student": {"max_new_tokens": 5}}
    )
    assert config.sampling("teacher") == Sampling(temperature=0.9, top_p=0.95, max_new_tokens=7)
    config = SelfPlayConfig(
        temperature=0.9, roles={"teacher": {"temperature": 0.6}, "student": {"top_p": 0.8, "max_new_tokens": 5}}
    )
    assert config.sampling("teacher") == Sampling(temperature=0.6, top_p=1.0, max_new_tokens=160)
    assert config.sampling("student", stop=("\n",)) == Sampling(
        temperature=0.9, top_p=0.8, max_new_tokens=5, stop=("\n",)
    )
    assert config.sampling("critic") == Sampling(temperature=0.9, top_p=1.0, max_new_tokens=8, stop=("\n",))
    with pytest.raises(ValueError, match=r"no rollout settings for role 'judge': add selfplay\.roles\.judge"):
        config.sampling("judge")
    for role, key, value in (("teacher", "temperature", 0), ("student", "top_p", 1.5)):
        with pytest.raises(ConfigError, match=f"selfplay.roles.{role}.{key}"):
            config_from_dict({"selfplay": {"roles": {role: {key: value}}}})


class _Copier(ArithTask):
    """Arith with fixed examples; the stubbed teacher rollout writes the texts in ``texts``."""

    def proposal_request(self, rng):
        return ProposalRequest([{"role": "user", "content": "write"}], "Problem:", examples=("7 + 5", "9 - 4"))


def test_play_step_uses_role_sampling_and_penalises_copies_and_repeats(tiny, monkeypatch):
    tokenizer = tiny[1]
    bank, teachers, students, ratings = rated_pair(tiny[0], tokenizer=tiny[1])
    texts = [" 7+5 ?", " 8 * 3", " 8*3", " 2 + 2"]  # a copy of an example, a repeated problem, a fresh one
    calls = []

    def fake_rollout(prompts, adapters, sampling, **kwargs):  # the bank protocol's rollout
        calls.append(sampling)
        if sampling.max_new_tokens == 9:  # the teacher's limit
            return [Completion(a, tuple(p), (5,), t, False) for p, a, t in zip(prompts, adapters, texts)]
        return [Completion(a, tuple(p), (6,), "12", False) for p, a in zip(prompts, adapters)]

    monkeypatch.setattr(bank, "rollout", fake_rollout)
    config = SelfPlayConfig(
        proposals_per_teacher=4,
        samples_per_problem=2,
        roles={
            "teacher": {"max_new_tokens": 9, "temperature": 0.7},
            "student": {"max_new_tokens": 3, "temperature": 0.4, "top_p": 0.9},
        },
        temperature=1.0,
        rewards=RewardConfig(copied=-0.25, repetition=0.6),
    )
    outcome = play_step(
        bank,
        tokenizer,
        _Copier(),
        teachers,
        students,
        ratings,
        config,
        rng=random.Random(0),
        np_rng=np.random.default_rng(0),
    )
    assert (calls[0].temperature, calls[0].top_p) == (0.7, 1.0)
    assert (calls[1].temperature, calls[1].top_p, calls[1].max_new_tokens) == (0.4, 0.9, 3)
    games = outcome.games
    assert [g.problem for g in games] == ["7+5", "8 * 3", "8*3", "2 + 2"]
    assert [g.copied for g in games] == [True, False, False, False]
    assert [g.repetition_penalty for g in games] == pytest.approx([0.0, 0.2, 0.2, 0.0])  # 0.6 * (2 - 1) / 3
    # "12" is right for 7+5 only: the copy gets `copied`; 8*3 and 2+2 are unsolved (trivial 0)
    assert [g.teacher_reward for g in games] == pytest.approx([-0.25, -0.2, -0.2, 0.0])
    assert [s.reward for s in outcome.samples[teachers[0].id]] == pytest.approx([-0.25, -0.2, -0.2, 0.0])


@pytest.mark.parametrize("stop, teacher_stop", [((), ()), (("\n",), ()), ((), ("\n", "?")), (("\n",), ("\n",))])
def test_each_role_gets_its_own_stop_strings(tiny, monkeypatch, stop, teacher_stop):
    tokenizer = tiny[1]
    bank, teachers, students, ratings = rated_pair(tiny[0], tokenizer=tiny[1])
    calls = []

    def fake_rollout(prompts, adapters, sampling, **kwargs):
        calls.append(sampling)
        text = " 2 + 2" if len(calls) == 1 else "4"
        return [Completion(a, tuple(p), (5,), text, False) for p, a in zip(prompts, adapters)]

    monkeypatch.setattr(bank, "rollout", fake_rollout)
    config = SelfPlayConfig(
        proposals_per_teacher=1,
        samples_per_problem=2,
        roles={"student": {"stop": stop}, "teacher": {"stop": teacher_stop}},
    )
    play_step(
        bank,
        tokenizer,
        _Copier(),
        teachers,
        students,
        ratings,
        config,
        rng=random.Random(0),
        np_rng=np.random.default_rng(0),
    )
    assert len(calls) == 2 and calls[0].stop == teacher_stop and calls[1].stop == stop
    for role in ("student", "teacher", "critic"):
        with pytest.raises(ConfigError, match=f"selfplay.roles.{role}.stop: an empty stop string"):
            config_from_dict({"selfplay": {"roles": {role: {"stop": ["\n", ""]}}}})


def test_structured_teacher_rows_stop_as_their_segments_say(tiny, monkeypatch):
    """``roles.teacher.stop`` is for free-form proposals only: segmented ones (gsm's forced program
    fence) keep their own stops."""
    from evolora.tasks.base import Segment

    class Structured(_Copier):
        def proposal_request(self, rng):
            return ProposalRequest(
                [{"role": "user", "content": "write"}], "Problem:", examples=(), segments=(Segment(stop=("?",)),)
            )

    bank, teachers, students, ratings = rated_pair(tiny[0], tokenizer=tiny[1])
    calls = []

    def fake_rollout(prompts, adapters, sampling, **kwargs):
        calls.append({**kwargs, "stop": sampling.stop})
        return [
            Completion(a, tuple(p), (5,), " 2 + 2" if len(calls) == 1 else "4", False)
            for p, a in zip(prompts, adapters)
        ]

    monkeypatch.setattr(bank, "rollout", fake_rollout)
    config = SelfPlayConfig(proposals_per_teacher=1, samples_per_problem=2, roles={"teacher": {"stop": ("\n",)}})
    play_step(
        bank,
        tiny[1],
        Structured(),
        teachers,
        students,
        ratings,
        config,
        rng=random.Random(0),
        np_rng=np.random.default_rng(0),
    )
    assert calls[0]["stop"] == () and calls[0]["segments"] == (Segment(stop=("?",)),)


def test_repetition_penalty_and_copied_reward():
    assert repetition_penalties(["1+1", "1 + 1", "1+1?", "2+2"], 0.9) == pytest.approx([0.6, 0.6, 0.6, 0.0])
    assert repetition_penalties(["1+1", "2+2"], 0.9) == [0.0, 0.0]
    assert repetition_penalties(["1+1", "1+1"], 0.0) == [0.0, 0.0]
    assert repetition_penalties(["5"], 1.0) == [0.0]
    rewards = RewardConfig(trivial=-0.1)
    assert teacher_reward(0.5, rewards, copied=True) == -0.1  # copied=None: the trivial reward
    assert teacher_reward(0.5, RewardConfig(copied=-0.7), copied=True) == -0.7
    assert teacher_reward(None, RewardConfig(copied=-0.7), copied=True) == RewardConfig().invalid
    assert teacher_reward(0.5, rewards) == 0.5
    assert normalise_problem(" 7 + 5 ? ") == normalise_problem("7+5") != normalise_problem("7+6")


def test_random_arith_examples_are_fresh_and_never_held_out():
    task = ArithTask(examples="random", example_digits=1, example_ops=2, num_examples=3)
    held_out = {item.question for item in task.grid()}
    shown = [e for seed in range(200) for e in task.proposal_request(random.Random(seed)).examples]
    assert len(shown) == 600 and not held_out & set(shown)
    assert len(set(shown)) > 300  # fixed examples would give at most 10
    request = task.proposal_request(random.Random(1))
    assert all(f"Problem: {e}" in request.messages[-1]["content"] for e in request.examples)
    assert all(
        task.verify([task.parse_proposal(f"Problem: {e}")])[0].reason in ("ok", "not_integer") for e in shown[:50]
    )
    with pytest.raises(ValueError, match="examples in"):
        ArithTask(examples="shuffled")


def test_doctests_of_the_new_helpers():
    import doctest

    from evolora import selfplay as selfplay_module
    from evolora.tasks import base
    from evolora.tasks.arith import text as arith_text

    for module in (selfplay_module, arith_text, base):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__


@pytest.mark.parametrize("mode", ["per_proposal", "per_teacher"])
def test_teacher_prompt_per_teacher_shares_one_prompt_within_each_teacher(tiny, monkeypatch, mode):
    tokenizer = tiny[1]
    bank, teachers, students, ratings = rated_pair(tiny[0], teachers=2, tokenizer=tiny[1])
    calls = []

    def fake_rollout(prompts, adapters, sampling, **kwargs):
        calls.append((prompts, adapters))
        return [Completion(a, tuple(p), (5,), " 2 + 2", False) for p, a in zip(prompts, adapters)]

    monkeypatch.setattr(bank, "rollout", fake_rollout)
    config = SelfPlayConfig(proposals_per_teacher=3, samples_per_problem=2, teacher_prompt=mode)
    play_step(
        bank,
        tokenizer,
        ArithTask(examples="random"),
        teachers,
        students,
        ratings,
        config,
        rng=random.Random(0),
        np_rng=np.random.default_rng(0),
    )
    prompts, adapters = calls[0]
    by_teacher = [[tuple(p) for p, a in zip(prompts, adapters) if a == t.slot] for t in teachers]
    assert [len(rows) for rows in by_teacher] == [3, 3]
    distinct = [len(set(rows)) for rows in by_teacher]
    assert distinct == ([1, 1] if mode == "per_teacher" else [3, 3])  # fresh random examples per request
    assert by_teacher[0][0] != by_teacher[1][0]  # teachers never share a prompt
