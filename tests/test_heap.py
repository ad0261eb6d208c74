"""evolora.generation.heap: trimming and the mmap threshold around a long decode."""

import sys

import pytest
import torch

from evolora.generation import heap

GLIBC = sys.platform.startswith("linux") and heap._libc() is not False


@pytest.fixture
def mallopt_calls(monkeypatch):
    """The (parameter, value) of every ``mallopt`` call, passed on to the real glibc."""
    calls, real = [], heap._libc()

    class Recorder:
        def mallopt(self, param, value):
            calls.append((param, value))
            return real.mallopt(param, value)

        def malloc_trim(self, pad):
            return real.malloc_trim(pad)

    monkeypatch.setattr(heap, "_libc", lambda: Recorder())
    return calls


def test_threshold_below_a_page_is_refused_before_anything_changes():
    with pytest.raises(ValueError, match="4096"):
        with heap.mapped_blocks(1024):
            pass


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_mapped_blocks_sets_the_threshold_and_fixes_it_on_exit(mallopt_calls):
    with heap.mapped_blocks(2 << 20) as done:
        assert done is True
        assert mallopt_calls == [(heap.M_MMAP_THRESHOLD, 2 << 20)]
    assert mallopt_calls == [(heap.M_MMAP_THRESHOLD, 2 << 20), (heap.M_MMAP_THRESHOLD, heap.DYNAMIC_MAX)]


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_threshold_is_restored_when_the_block_raises(mallopt_calls):
    with pytest.raises(RuntimeError):
        with heap.mapped_blocks():
            raise RuntimeError("decode failed")
    assert [value for _, value in mallopt_calls] == [1 << 20, heap.DYNAMIC_MAX]


def test_without_glibc_it_is_a_no_op(monkeypatch):
    monkeypatch.setattr(heap, "_libc", lambda: False)
    with heap.mapped_blocks() as done:
        assert done is False
    assert heap.trim() is False


@pytest.mark.skipif(not GLIBC, reason="glibc only")
def test_a_bank_update_runs_with_large_blocks_mapped(tiny, mallopt_calls, monkeypatch):
    """The heap is trimmed first, then the threshold is 1 MB while the update's forward and
    backward run, and fixed again after it."""
    from bank_helpers import random_bank

    import evolora.bank.local as population
    from evolora.learner import Sample

    seen = []
    real = population.policy_update_many
    monkeypatch.setattr(
        population, "policy_update_many", lambda *a, **k: seen.append(list(mallopt_calls)) or real(*a, **k)
    )
    trims = []
    monkeypatch.setattr(heap, "trim", lambda: trims.append((len(seen), list(mallopt_calls))) or True)
    bank = random_bank(tiny[0], ["A0"], target_modules=("q_proj",), b_std=0.1)
    optimizer = bank.new_optimizer("A0", lr=1e-2, weight_decay=0.0)
    samples = [Sample((5, 6), (7, 2), 1.0, "g"), Sample((5, 6), (8, 2), 0.0, "g")]
    before = bank.get_factors("A0")
    bank.update({"A0": (optimizer, samples)}, algorithm="grpo")
    assert seen == [[(heap.M_MMAP_THRESHOLD, 1 << 20)]]
    assert trims == [(0, [])]  # before the update and before the threshold moved
    assert mallopt_calls == [(heap.M_MMAP_THRESHOLD, 1 << 20), (heap.M_MMAP_THRESHOLD, heap.DYNAMIC_MAX)]
    after = bank.get_factors("A0")
    assert any(not torch.equal(before[k][1], after[k][1]) for k in before)  # the update did move B
