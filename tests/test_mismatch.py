"""The rollout/update log-prob gap (the importance ratio's error floor): rounding in fp32, bounded in bf16."""

from __future__ import annotations

import pytest
import torch

from evolora.generation.mismatch import path_gap, summarize
from evolora.learner import Sample
from evolora.model import load_base
from evolora.population import AdapterBank

NAMES = ["A0", "A1", "A2", "A1"]


def _gap(dtype: str) -> dict[str, float]:
    model, _ = load_base("tiny-random", dtype=dtype)
    bank = AdapterBank(model, ["A0", "A1", "A2"], rank=4, alpha=8, target_modules="all-linear")
    generator = torch.Generator().manual_seed(0)
    for slot in bank.slots:
        bank.init_factors(slot, generator, b_std=0.05)
    samples = [Sample(tuple(torch.randint(3, 60, (6,), generator=generator).tolist()),
                      tuple(torch.randint(3, 60, (10,), generator=generator).tolist()), 0.0, "g")
               for _ in NAMES]
    return summarize(path_gap(bank, NAMES, samples))


def test_fp32_paths_agree_to_rounding():
    assert _gap("float32")["max"] < 1e-4


def test_bf16_gap_is_bounded_and_larger_than_fp32():
    """Bound: 0.05 nats per token at most (importance ratio within [0.95, 1.05]), on the tiny model."""
    bf16 = _gap("bfloat16")
    assert bf16["max"] < 0.05, bf16
    assert bf16["ratio_max"] < 1.052
    assert bf16["mean"] > _gap("float32")["mean"]  # the bf16 figure measures something


def test_summary_of_nothing_is_refused():
    with pytest.raises(ValueError, match="no completion tokens"):
        summarize(torch.zeros(0))
