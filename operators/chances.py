"""Exact parent chances of the built-in selections: the probability that each member is drawn.

    chances = selection_chances("tournament", fitness, {"k": 3})       # (P,), sums to 1
    S       = (chances * held_out).sum() - held_out.mean()             # expected selection differential

One draw of each operator at its parameters, computed in closed form instead of sampled, so a
replay of recorded events (benchmarks/selection_replay.py) compares operators without Monte Carlo
noise. Every formula is checked against the operator's own draws in tests/test_chances.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

from .lexicase import lexicase_chances
from .registry import REGISTRY
from .selection import _fitness, rank_chances, rank_order, softmax_chances

__all__ = ["selection_chances", "require_exact", "EXACT"]


def _by_position(f: Tensor, weights: Tensor) -> Tensor:
    """(P,) chances from ``weights`` (P,) listed best first (:func:`rank_order`, ties by index)."""
    chances = torch.zeros_like(f)
    chances[rank_order(f)] = weights
    return chances


def _tournament(f: Tensor, params: Mapping, cases: Tensor | None) -> Tensor:
    size, k = f.numel(), int(params["k"])
    position = torch.arange(size, dtype=torch.float64, device="cpu")
    if params["replace"]:  # the best of k uniform draws: P(best ≥ j-th) differences
        weights = ((size - position) / size) ** k - ((size - position - 1) / size) ** k
    else:  # m distinct contestants: the j-th best wins when it is drawn and no better one is
        m = min(k, size)
        weights = torch.tensor([math.comb(size - 1 - j, m - 1) / math.comb(size, m) for j in range(size)], device="cpu")
    return _by_position(f, weights.to(torch.float64))


def _truncation(f: Tensor, params: Mapping, cases: Tensor | None) -> Tensor:
    top = max(1, math.ceil(float(params["fraction"]) * f.numel()))
    weights = torch.zeros_like(f)
    weights[:top] = 1.0 / top
    return _by_position(f, weights)


def _rank(f: Tensor, params: Mapping, cases: Tensor | None) -> Tensor:
    return rank_chances(f, float(params["pressure"])) if f.numel() > 1 else torch.ones_like(f)


def _fitness_proportional(f: Tensor, params: Mapping, cases: Tensor | None) -> Tensor:
    return softmax_chances(f, float(params["temperature"]))


def _lexicase(f: Tensor, params: Mapping, cases: Tensor | None) -> Tensor:
    return lexicase_chances(f, cases, params["epsilon"])


EXACT = {
    "tournament": _tournament,
    "truncation": _truncation,
    "rank": _rank,
    "fitness_proportional": _fitness_proportional,
    "lexicase": _lexicase,
}
"""Registered selection name -> its exact chances (fitness (P,), params, cases) -> (P,)."""


def selection_chances(
    name: str, fitness: Tensor, params: Mapping | None = None, cases: Tensor | None = None
) -> Tensor | None:
    """The chance that each member is drawn by one draw of selection ``name`` with ``params``.

    Shapes:
        fitness: (P,); cases: (P, N) or None (read by ``lexicase`` only) → (P,) float64, sums to 1.

    Args:
        name: a registered selection (:data:`EXACT`); params: its parameters (omitted: defaults).

    Returns:
        The chances, or None for an operator without a closed form here (a user's own).

    Raises:
        ValueError: bad fitness, cases or parameters, or ``lexicase`` with a tolerance under which
            its chances have no exact form here (several continuous cases with ε > 0).
    """
    if name not in EXACT:
        return None
    checked = REGISTRY.validate("selection", name, params)  # the registered defaults fill what is omitted
    return EXACT[name](_fitness(fitness), checked, cases)


def require_exact(name: str) -> None:
    """Refuse a selection whose chances have no closed form here, for what needs them (universal
    sampling, :func:`evolora.operators.universal`).

    Raises:
        ValueError: ``name`` is not in :data:`EXACT`; the message lists those that are.
    """
    if name not in EXACT:
        raise ValueError(
            f"selection {name!r} has no exact chances here, and universal sampling deals parents by them "
            f"(known for {', '.join(EXACT)})"
        )
