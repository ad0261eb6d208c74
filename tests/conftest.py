"""Shared fixtures: a tiny random model (no download) and a toy task where anything is valid."""

from __future__ import annotations

import random

import pytest

from evolora.tasks.base import Grade, HeldOutItem, Proposal, Verdict
from evolora.tasks.numeric import final_number


class ToyTask:
    """A game the tiny random model can play: any non-empty proposal is a valid problem whose
    answer is its length mod 10; a student is correct when its last number equals it."""

    name = "toy"
    proposal_prefix = ""

    def proposal_prompt(self, rng: random.Random):
        return [{"role": "user", "content": f"propose {rng.randint(0, 9)}"}]

    def parse_proposal(self, text: str):
        return Proposal(problem=text, program="", raw=text) if text.strip() else None

    def verify(self, proposals):
        return [Verdict(True, float(len(p.problem) % 10), "ok") if p else Verdict(False, None, "parse")
                for p in proposals]

    def solve_prompt(self, problem: str):
        return [{"role": "user", "content": problem[:40]}]

    def grade(self, completion: str, answer: float) -> Grade:
        value = final_number(completion)
        if value is None:
            return Grade("format", None)
        return Grade("correct" if value == answer else "wrong", value)

    def held_out(self, limit, rng):
        return [HeldOutItem(f"q{i}", float(i % 10)) for i in range(limit)]


@pytest.fixture
def toy_task():
    return ToyTask()


@pytest.fixture
def tiny():
    """A fresh frozen tiny random Llama and its character tokenizer."""
    from evolora.model import load_base

    return load_base("tiny-random")


TINY_OVERRIDES = {
    "model": {"name": "tiny-random"},
    "lora": {"rank": 4, "alpha": 8, "init_b_std": 0.05},
    "population": {"teachers": 2, "students": 2},
    "run": {"steps": 4, "seed": 0},
    "selfplay": {"proposals_per_teacher": 2, "samples_per_problem": 3, "teacher_max_new_tokens": 12,
                 "student_max_new_tokens": 8},
    "learner": {"lr": 1e-2},
    "evolution": {"every": 1, "gamma": 0.5, "crossover_rate": 0.5},
    "eval": {"limit": 4, "max_new_tokens": 6},
}


@pytest.fixture
def tiny_config():
    from evolora.config import config_from_dict

    return config_from_dict(TINY_OVERRIDES)
