"""Shared fixtures: a tiny random model (no download) and the toy task where anything is valid."""

from __future__ import annotations

import pytest
from run_helpers import TINY_OVERRIDES

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


@pytest.fixture
def tiny_config():
    from evolora.config import config_from_dict

    return config_from_dict(TINY_OVERRIDES)


@pytest.fixture(scope="session")
def crash_reference(tmp_path_factory):
    """An undisturbed tiny ``evolora evolve`` run (see ``crash_helpers``): metrics and matches."""
    from crash_helpers import uninterrupted

    return uninterrupted(tmp_path_factory.mktemp("crash") / "uninterrupted")


@pytest.fixture(autouse=True)
def _held_out_cache(tmp_path, monkeypatch):
    """Each test gets its own cache of the base's held-out answers (evolora.evaluation.base_cache)."""
    import evolora.evaluation.base_cache as base_cache

    monkeypatch.setattr(base_cache, "_path", lambda key: tmp_path / "held_out" / f"{key}.json")
