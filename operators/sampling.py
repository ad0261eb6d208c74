"""Parent sampling: how one event's parents are drawn from each member's chance of being selected.

    independent  every parent is its own draw of the selection operator: member i is drawn
                 Binomial(m, p_i) times of m (the outer loop's default)
    universal    stochastic universal sampling: one offset u ~ U[0, 1/m) and m evenly spaced
                 pointers u + j/m over the cumulative chances, so member i is drawn ⌊m·p_i⌋ or
                 ⌈m·p_i⌉ times, m·p_i on average

Both keep every member's expected share p_i, so the expected selection differential is the same;
universal sampling removes most of the spread of the realised one, which with the 2–4 parent draws
of an event is about as large as the differences between selection operators
(docs/results/evolution.md, calibration replay).

References:
    Baker, "Reducing bias and inefficiency in the selection algorithm", ICGA 1987 (SUS).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .chances import require_exact, selection_chances
from .selection import _check_num

__all__ = ["universal", "universal_selection", "independent_spread", "universal_spread"]


def _chances(chances: Tensor) -> Tensor:
    """``chances`` as a checked (P,) float64 CPU tensor that sums to 1."""
    p = torch.as_tensor(chances, device="cpu").to(torch.float64)
    if p.ndim != 1 or p.numel() == 0:
        raise ValueError(f"chances must be a non-empty 1-D tensor (P,), got shape {tuple(p.shape)}")
    if not bool(torch.isfinite(p).all()) or bool((p < 0).any()):
        raise ValueError("chances must be finite and ≥ 0")
    if not math.isclose(float(p.sum()), 1.0, abs_tol=1e-9):
        raise ValueError(f"chances must sum to 1, got {float(p.sum()):.6g}")
    return p


def _pick(cumulative: Tensor, pointers: Tensor) -> Tensor:
    """The member whose interval [c_{i-1}, c_i) holds each pointer in [0, 1) (members of chance 0 never)."""
    return torch.searchsorted(cumulative, pointers, right=True).clamp_max(cumulative.numel() - 1)


def universal(chances: Tensor, num: int, *, generator: torch.Generator) -> Tensor:
    """Stochastic universal sampling: ``num`` member indices, each member ⌊num·p_i⌋ or ⌈num·p_i⌉ times.

    One uniform offset from ``generator`` places ``num`` evenly spaced pointers over the cumulative
    chances; the picks are then put in an order drawn from ``generator``, so consecutive picks (a
    crossover's two parents) pair at random.

    Shapes:
        chances: (P,), ≥ 0, summing to 1 (e.g. :func:`evolora.operators.selection_chances`)
        → (num,) long indices in [0, P), on the CPU.

    Args:
        chances: each member's chance per draw.
        num: the number of parents, ≥ 0.
        generator: draws the offset and the order.

    Raises:
        ValueError: chances not a (P,) distribution; num not an int ≥ 0.

    References:
        Baker, ICGA 1987 (stochastic universal sampling).
    """
    p = _chances(chances)
    _check_num(num)
    if num == 0:
        return torch.empty(0, dtype=torch.long, device="cpu")
    offset = torch.rand((), generator=generator, device=generator.device).item()
    pointers = (offset + torch.arange(num, dtype=torch.float64, device="cpu")) / num
    picks = _pick(p.cumsum(0), pointers)
    order = torch.randperm(num, generator=generator, device=generator.device).cpu()
    return picks[order]


def universal_selection(
    name: str, fitness: Tensor, num: int, *, generator: torch.Generator, params=None, cases: Tensor | None = None
) -> Tensor:
    """``num`` parents of selection ``name`` dealt by :func:`universal` over its exact chances
    (:func:`evolora.operators.selection_chances` with ``params`` and ``cases``), in random order.

    Shapes:
        fitness: (P,); cases: (P, N) or None → (num,) long indices in [0, P), on the CPU.

    Raises:
        ValueError: a selection without exact chances (:func:`evolora.operators.require_exact`), or
            as :func:`selection_chances` and :func:`universal`.
    """
    require_exact(name)
    return universal(selection_chances(name, fitness, params, cases), num, generator=generator)


def _distribution(chances: Tensor, values: Tensor, num: int) -> tuple[Tensor, Tensor, float]:
    """(checked chances, values as float64, the expected parents' mean Σ p_i·x_i)."""
    p = _chances(chances)
    x = torch.as_tensor(values, device="cpu").to(torch.float64)
    if x.shape != p.shape:
        raise ValueError(f"values must have the chances' shape {tuple(p.shape)}, got {tuple(x.shape)}")
    if not isinstance(num, int) or isinstance(num, bool) or num < 1:
        raise ValueError(f"num must be an int ≥ 1, got {num!r}")
    return p, x, float((p * x).sum())


def independent_spread(chances: Tensor, values: Tensor, num: int) -> float:
    """The standard deviation of the realised selection differential of ``num`` independent draws.

    The realised differential is the parents' mean value minus the members' mean; its mean over the
    draws is Σ p_i·x_i − mean(x) and its SD √(Var_p(x) / num), exactly.

    Shapes:
        chances: (P,) distribution; values: (P,) any units → SD in the units of ``values``.

    Raises:
        ValueError: bad chances, values of another shape, num < 1.
    """
    p, x, mean = _distribution(chances, values, num)
    return math.sqrt(max(float((p * (x - mean) ** 2).sum()), 0.0) / num)


def universal_spread(chances: Tensor, values: Tensor, num: int) -> float:
    """The standard deviation of the realised selection differential of ``num`` parents drawn by
    :func:`universal`, exactly.

    The picks are a step function of the offset, constant between the points where a pointer
    crosses a cumulative chance, so the variance is a finite sum over those pieces; the mean is
    Σ p_i·x_i − mean(x), as with independent draws.

    Shapes:
        chances: (P,) distribution; values: (P,) any units → SD in the units of ``values``.

    Raises:
        ValueError: bad chances, values of another shape, num < 1.
    """
    p, x, mean = _distribution(chances, values, num)
    cumulative = p.cumsum(0)
    # a pointer (t + j)/num crosses c_i at t = frac(num·c_i): the picks are constant between these
    cuts = torch.frac(num * cumulative).tolist()
    edges = sorted({0.0, 1.0, *(c for c in cuts if 0.0 < c < 1.0)})
    steps = torch.arange(num, dtype=torch.float64, device="cpu")
    variance = 0.0
    for low, high in zip(edges, edges[1:]):
        picks = _pick(cumulative, ((low + high) / 2 + steps) / num)
        variance += (high - low) * (float(x[picks].mean()) - mean) ** 2
    return math.sqrt(variance)
