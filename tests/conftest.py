"""Shared fixtures: a tiny random model (no download) and the toy task where anything is valid."""

from __future__ import annotations


import pytest

from evolora.tasks.toy import ToyTask


@pytest.fixture(scope="module")
def single_thread():
    """Tiny tensors: one thread is fastest and avoids OpenMP stalls when other jobs share the cores."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def toy_task():
    """Any non-empty proposal is valid (answer: its length mod 10), so every phase runs."""
    return ToyTask(max_problem_chars=40)


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


@pytest.fixture(scope="session")
def crash_reference(tmp_path_factory):
    """An undisturbed tiny ``evolora evolve`` run (see ``crash_helpers``): metrics and matches."""
    from crash_helpers import uninterrupted

    return uninterrupted(tmp_path_factory.mktemp("crash") / "uninterrupted")
