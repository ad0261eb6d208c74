"""The agreement gate: the base model's answers decide which valid proposals stay valid, and the
agreement fraction is recorded; off, nothing is sampled."""

from __future__ import annotations

import pytest

from evolora.config.selfplay import SelfPlayConfig
from evolora.generation.rollout import Completion
from evolora.generation.routed import BASE
from evolora.selfplay import GameRecord
from evolora.selfplay.agreement import gate_by_agreement
from evolora.tasks.toy import ToyTask


class _Bank:
    """Answers each prompt with the next scripted text; records the routes it was asked for."""

    def __init__(self, texts):
        self.texts, self.routes = list(texts), []

    def rollout(self, prompts, adapters, sampling, **options):
        self.routes += adapters
        return [Completion(a, tuple(p), (1,), self.texts.pop(0), False) for p, a in zip(prompts, adapters)]


class _Tokenizer:
    def apply_chat_template(self, messages, **kwargs):
        return messages[-1]["content"]

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text[:8]]}


def _games():
    return [
        GameRecord("T0", "S0", "", "abc", None, True, "ok", 3.0),
        GameRecord("T0", "S0", "", None, None, False, "parse", None),
        GameRecord("T0", "S0", "", "abcdefg", None, True, "ok", 7.0),
    ]


def test_the_gate_keeps_agreed_proposals_and_records_the_fraction():
    config = SelfPlayConfig(agreement={"solver": "base", "samples": 4, "threshold": 0.5})
    bank = _Bank(["3", "3", "4", "9", "7", "1", "2", "5"])  # 2/4 reach 3; 1/4 reach 7
    games = _games()
    gate_by_agreement(bank, _Tokenizer(), ToyTask(max_problem_chars=40), games, config)
    assert bank.routes == [BASE] * 8  # only the two valid games, through the frozen base
    assert [g.agreement for g in games] == [0.5, None, 0.25]
    assert [(g.valid, g.reason) for g in games] == [(True, "ok"), (False, "parse"), (False, "disagreement")]


def test_off_by_default_and_samples_nothing():
    bank, games = _Bank([]), _games()
    gate_by_agreement(bank, _Tokenizer(), ToyTask(max_problem_chars=40), games, SelfPlayConfig())
    assert bank.routes == [] and [g.valid for g in games] == [True, False, True]
    with pytest.raises(ValueError):
        SelfPlayConfig(agreement={"solver": "base", "threshold": 0})
