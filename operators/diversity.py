"""Diversity of a population in ΔW space, computed from the factors (no ΔW is formed).

    ‖ΔW_x − ΔW_y‖²_F = ⟨ΔW_x, ΔW_x⟩ + ⟨ΔW_y, ΔW_y⟩ − 2 ⟨ΔW_x, ΔW_y⟩,  ΔW = B A,

summed over modules. ``population_diversity`` divides the mean pairwise distance by the
mean norm, so 0 means identical adapters, ~1.41 two unrelated (orthogonal) adapters of equal
norm, and the number does not depend on the LoRA scale α / r.

Source: PopuLoRA (arXiv 2605.16727) §4 (population diversity of the evolved members).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from .adapter import check_parents
from .lowrank import frobenius_inner

Adapter = Mapping[str, tuple[Tensor, Tensor]]


def delta_distance(x: Adapter, y: Adapter) -> Tensor:
    """‖ΔW_x − ΔW_y‖_F over all modules (a 0-dim float64 tensor, ≥ 0).

    Shapes: each module's A (r, d_in), B (d_out, r), the same for x and y.
    Raises: ValueError when the adapters' modules, shapes or ranks differ.
    """
    check_parents([x, y])
    total = torch.zeros((), dtype=torch.float64, device=next(iter(x.values()))[0].device)
    for name, (a1, b1) in x.items():
        a2, b2 = y[name]
        total = (
            total
            + frobenius_inner(a1, b1, a1, b1)
            + frobenius_inner(a2, b2, a2, b2)
            - 2 * frobenius_inner(a1, b1, a2, b2)
        )
    return total.clamp(min=0).sqrt()


def delta_norm(x: Adapter) -> Tensor:
    """‖ΔW_x‖_F over all modules (a 0-dim float64 tensor, ≥ 0)."""
    return sum(frobenius_inner(a, b, a, b) for a, b in x.values()).clamp(min=0).sqrt()


def population_diversity(adapters: Sequence[Adapter]) -> float:
    """Mean pairwise ‖ΔW_i − ΔW_j‖_F divided by the mean ‖ΔW_i‖_F (≥ 0; 0 when all are equal).

    Raises: ValueError with fewer than 2 adapters, mismatched modules, or all-zero adapters.

    >>> g = torch.Generator().manual_seed(0)
    >>> x = {"q": (torch.randn(2, 8, generator=g), torch.randn(8, 2, generator=g))}
    >>> population_diversity([x, x]), round(population_diversity([x, {"q": (x["q"][0], -x["q"][1])}]), 3)
    (0.0, 2.0)
    """
    if len(adapters) < 2:
        raise ValueError(f"population_diversity needs at least 2 adapters, got {len(adapters)}")
    check_parents(adapters)
    norm = float(torch.stack([delta_norm(a) for a in adapters]).mean())
    if norm == 0:
        raise ValueError("population_diversity: every ΔW is zero; initialise B with a non-zero std")
    pairs = [float(delta_distance(x, y)) for x, y in itertools.combinations(adapters, 2)]
    return sum(pairs) / len(pairs) / norm
