"""Shared fixtures: a tiny random model (no download) and the toy task where anything is valid.

Under pytest-xdist (``-n 2 --dist loadfile``, the README's test command) each worker runs torch and
the programs it starts with one thread, each test file runs whole on one worker (its module-scoped
runs are built once), the crash reference run is built once for both workers, and the files that
hold ``slow`` tests are handed out first so that the quick ones fill the end.
"""

from __future__ import annotations

import os

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
    """An undisturbed tiny ``evolora evolve`` run (see ``crash_helpers``): metrics and matches, run
    once per pytest run (xdist workers share the folder above their own temporary folders)."""
    from crash_helpers import shared_uninterrupted

    root = tmp_path_factory.getbasetemp()
    return shared_uninterrupted(root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root)


@pytest.fixture(autouse=True)
def _held_out_cache(tmp_path, monkeypatch):
    """Each test gets its own cache of the base's held-out answers (evolora.evaluation.base_cache)."""
    import evolora.evaluation.base_cache as base_cache

    monkeypatch.setattr(base_cache, "_path", lambda key: tmp_path / "held_out" / f"{key}.json")


def pytest_configure(config):
    """One torch thread per xdist worker (two 2-thread processes on 2 cores stall each other), also
    for the programs the tests start; the controller hands out the test files in collection order."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = "1"
        import torch

        torch.set_num_threads(1)
    if config.getoption("numprocesses", None):
        config.option.loadscopereorder = False  # not by test count: pytest_collection_modifyitems' order


def pytest_collection_modifyitems(config, items):
    """In an xdist worker: the files that hold a ``slow`` test first (file order kept otherwise), so
    the long files start at once and the quick ones fill the end on both workers."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)
