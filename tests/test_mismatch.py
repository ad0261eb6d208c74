"""The rollout/update log-prob gap (the importance ratio's error floor): none by default, bounded with bf16 LoRA matmuls."""

from __future__ import annotations

import pytest
import torch

from evolora.bank.local import AdapterBank
from evolora.generation.mismatch import path_gap, summarize
from evolora.learner import Sample
from evolora.model import load_base

NAMES = ["A0", "A1", "A2", "A1"]


def _gap(dtype: str) -> dict[str, float]:
    model, _ = load_base("tiny-random", dtype=dtype)
    bank = AdapterBank(model, ["A0", "A1", "A2"], rank=4, alpha=8, target_modules="all-linear")
    generator = torch.Generator().manual_seed(0)
    for slot in bank.slots:
        bank.init_factors(slot, generator, b_std=0.05)
    samples = [
        Sample(
            tuple(torch.randint(3, 60, (6,), generator=generator).tolist()),
            tuple(torch.randint(3, 60, (10,), generator=generator).tolist()),
            0.0,
            "g",
        )
        for _ in NAMES
    ]
    return summarize(path_gap(bank, NAMES, samples))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_default_paths_agree(dtype):
    """The inference path computes the delta in fp32 and rounds once, as the training path does."""
    assert _gap(dtype)["max"] < 1e-6


def test_bf16_lora_matmuls_have_a_bounded_gap(monkeypatch):
    """Bound with bf16 LoRA matmuls: 0.05 nats per token (importance ratio within [0.95, 1.05]), tiny model."""
    import evolora.generation.routed as routed_module

    monkeypatch.setattr(routed_module, "LORA_COMPUTE_DTYPE", torch.bfloat16)
    bf16 = _gap("bfloat16")
    assert 0 < bf16["mean"] and bf16["max"] < 0.05, bf16
    assert bf16["ratio_max"] < 1.052


def test_summary_of_nothing_is_refused():
    with pytest.raises(ValueError, match="no completion tokens"):
        summarize(torch.zeros(0))
