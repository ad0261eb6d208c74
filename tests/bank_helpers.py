"""A routed adapter bank with random factors, for tests (not a test module)."""

from __future__ import annotations

import torch

from evolora.population import AdapterBank


def random_bank(model, slots: list[str], *, target_modules, b_std: float, seed: int = 0, rank: int = 4,
                alpha: int = 8) -> AdapterBank:
    """An :class:`AdapterBank` over ``model`` whose slots get factors drawn in slot order from one
    generator seeded with ``seed`` (B with standard deviation ``b_std``, so every ΔW differs)."""
    bank = AdapterBank(model, slots, rank=rank, alpha=alpha, target_modules=target_modules)
    generator = torch.Generator().manual_seed(seed)
    for slot in bank.slots:
        bank.init_factors(slot, generator, b_std=b_std)
    return bank
