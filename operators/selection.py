"""Parent selection and replacement on a fitness vector (higher is better).

Call signatures:

    selection:   fn(fitness: Tensor (P,), num: int, *, generator, **params) -> LongTensor (num,)
    replacement: fn(fitness: Tensor (P,), *, generator, **params) -> (replace_idx, parent_idx)

Ties are broken deterministically by index: among equal fitness the lower index ranks higher
(``rank`` selection instead gives tied individuals their mean rank, hence equal probability).
NaN fitness raises; ±inf is allowed. Indices come back on the fitness tensor's device.

References:
    DEAP tools.selection; Goldberg & Deb, "A comparative analysis of selection schemes", FOGA 1991;
    Baker 1985 (linear ranking); PBT (Jaderberg et al.), arXiv 1711.09846.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from .registry import Param, register

__all__ = [
    "tournament",
    "truncation",
    "fitness_proportional",
    "rank",
    "pbt_truncation",
    "rank_order",
    "num_replaced",
    "replaced_indices",
]


def _fitness(fitness: Tensor | Sequence[float]) -> Tensor:
    """The fitness as a (P,) float64 CPU tensor: selection is host arithmetic on P values."""
    f = torch.as_tensor(fitness, device="cpu")
    if f.ndim != 1 or f.numel() == 0:
        raise ValueError(f"fitness must be a non-empty 1-D tensor (P,), got shape {tuple(f.shape)}")
    f = f.to(torch.float64)
    if torch.isnan(f).any():
        raise ValueError("fitness contains NaN; replace it (e.g. by -inf) before selection")
    return f


def _device(fitness: Tensor | Sequence[float]) -> torch.device:
    """Where selected indices go: the fitness tensor's device (a sequence: the CPU)."""
    return fitness.device if isinstance(fitness, Tensor) else torch.device("cpu")


def _check_num(num: int) -> None:
    if not isinstance(num, int) or isinstance(num, bool) or num < 0:
        raise ValueError(f"num must be a non-negative int, got {num!r}")


def rank_order(fitness: Tensor | Sequence[float]) -> Tensor:
    """Indices from best to worst; equal fitness keeps index order (lower index first).

    Shapes:
        fitness: (P,) → (P,) long.
    """
    f = _fitness(fitness)
    return torch.sort(f, descending=True, stable=True).indices


def _draw(count: int, high: int, generator: torch.Generator) -> Tensor:
    """``count`` uniform ints in [0, high) (CPU, from ``generator``)."""
    return torch.randint(high, (count,), generator=generator, device=generator.device).cpu()


@register(
    "selection",
    k=Param(3, low=1, high=1_000_000, doc="tournament size"),
    replace=Param(True, doc="draw contestants with replacement (DEAP selTournament); false: distinct"),
)
def tournament(fitness: Tensor, num: int, *, generator: torch.Generator, k: int = 3, replace: bool = True) -> Tensor:
    """Tournament selection: the fittest of k random contestants, ``num`` independent times.

    With ``replace=True`` (the default, DEAP's ``selTournament``) the k contestants are drawn
    uniformly with replacement, so the best of P wins a tournament with probability
    1 − (1 − 1/P)^k. With ``replace=False`` they are min(k, P) distinct members, and k ≥ P
    always returns the best. Ties go to the lower index. An individual can win several
    tournaments.

    Shapes:
        fitness: (P,) → (num,) long indices in [0, P).

    Args:
        fitness: (P,) fitness, higher is better.
        num: number of selected parents, ≥ 0.
        generator: the torch generator that draws the contestants.
        k: tournament size, ≥ 1.
        replace: contestants drawn with replacement (see above).

    Raises:
        ValueError: empty/non-1-D/NaN fitness, num < 0, k < 1.

    References:
        Miller & Goldberg, "Genetic algorithms, tournament selection...", Complex Systems 1995; DEAP selTournament.
    """
    f = _fitness(fitness)
    _check_num(num)
    if k < 1:
        raise ValueError(f"tournament size k must be ≥ 1, got {k}")
    position = torch.empty_like(rank_order(f))
    position[rank_order(f)] = torch.arange(f.numel(), device=f.device)  # 0 = best
    if replace:
        contestants = _draw(num * k, f.numel(), generator).view(num, k)  # (num, k), repeats allowed
    else:
        keys = torch.rand(num, f.numel(), generator=generator, device=generator.device).cpu()
        contestants = keys.argsort(dim=-1)[:, : min(k, f.numel())]  # (num, size) distinct per row
    winners = contestants.gather(1, position[contestants].argmin(dim=1, keepdim=True)).squeeze(1)
    return winners.to(_device(fitness))


@register("selection", fraction=Param(0.5, low=0.0, high=1.0, doc="top fraction eligible (at least 1)"))
def truncation(fitness: Tensor, num: int, *, generator: torch.Generator, fraction: float = 0.5) -> Tensor:
    """Truncation selection: uniform with replacement among the top max(1, ceil(fraction·P)).

    Shapes:
        fitness: (P,) → (num,) long.

    Args:
        fraction: eligible top fraction in [0, 1].

    Raises:
        ValueError: bad fitness or num.

    References:
        Mühlenbein & Schlierkamp-Voosen, Evolutionary Computation 1993.
    """
    f = _fitness(fitness)
    _check_num(num)
    top = max(1, math.ceil(fraction * f.numel()))
    return rank_order(f)[:top][_draw(num, top, generator)].to(_device(fitness))


@register("selection", temperature=Param(1.0, low=1e-6, high=1e6, doc="softmax temperature, fitness units"))
def fitness_proportional(fitness: Tensor, num: int, *, generator: torch.Generator, temperature: float = 1.0) -> Tensor:
    """Boltzmann (softmax) selection: P(i) = softmax(fitness / temperature)_i, with replacement.

    Shift-invariant, so negative fitness is fine; −inf fitness has probability 0 (unless all are −inf:
    then uniform).

    Shapes:
        fitness: (P,) → (num,) long.

    Args:
        temperature: > 0, in fitness units; small → greedy, large → uniform.

    Raises:
        ValueError: bad fitness, num, or temperature ≤ 0.

    References:
        Goldberg 1989 (roulette wheel); de la Maza & Tidor 1993 (Boltzmann selection).
    """
    f = _fitness(fitness)
    _check_num(num)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    probs = softmax_chances(f, temperature)
    if num == 0:
        return torch.empty(0, dtype=torch.long, device=_device(fitness))
    picks = torch.multinomial(probs.to(generator.device), num, replacement=True, generator=generator)
    return picks.cpu().to(_device(fitness))


@register("selection", pressure=Param(1.5, low=1.0, high=2.0, doc="expected copies of the best, s"))
def rank(fitness: Tensor, num: int, *, generator: torch.Generator, pressure: float = 1.5) -> Tensor:
    """Linear ranking selection with pressure s ∈ [1, 2], with replacement.

    P(i) = (2 − s)/P + 2(s − 1)(P − 1 − ρ_i) / (P(P − 1)), ρ_i = 0 for the best (tied: mean rank).

    s = 1 is uniform; s = 2 gives the worst probability 0 and the best 2/P.

    Shapes:
        fitness: (P,) → (num,) long.

    Args:
        pressure: s in [1, 2].

    Raises:
        ValueError: bad fitness, num, or pressure outside [1, 2].

    References:
        Baker, "Adaptive selection methods for genetic algorithms", ICGA 1985.
    """
    f = _fitness(fitness)
    _check_num(num)
    if not 1.0 <= pressure <= 2.0:
        raise ValueError(f"pressure must be in [1, 2], got {pressure}")
    size = f.numel()
    if size == 1 or num == 0:
        return torch.zeros(num, dtype=torch.long, device=_device(fitness))
    probs = rank_chances(f, pressure)
    picks = torch.multinomial(probs.to(generator.device), num, replacement=True, generator=generator)
    return picks.cpu().to(_device(fitness))


def softmax_chances(f: Tensor, temperature: float) -> Tensor:
    """(P,) chance of each member per :func:`fitness_proportional` draw, for a checked (P,) float64 ``f``:
    softmax(f / T); +inf members share it all, all −inf is uniform."""
    if torch.isposinf(f).any():  # +inf dominates: uniform over them
        return torch.isposinf(f).to(f.dtype) / torch.isposinf(f).sum()
    if torch.isneginf(f).all():
        return torch.full_like(f, 1.0 / f.numel())
    return torch.softmax(f / temperature, dim=0)


def rank_chances(f: Tensor, pressure: float) -> Tensor:
    """(P,) chance of each member per :func:`rank` draw, for a checked (P,) float64 ``f`` with P ≥ 2:
    linear ranking with tied members at their mean rank (sums to 1)."""
    size = f.numel()
    better = (f[None, :] > f[:, None]).sum(dim=1).to(f.dtype)  # how many strictly better
    equal = (f[None, :] == f[:, None]).sum(dim=1).to(f.dtype)
    mean_rank = better + (equal - 1) / 2
    return ((2 - pressure) / size + 2 * (pressure - 1) * (size - 1 - mean_rank) / (size * (size - 1))).clamp_min(0)


def num_replaced(size: int, gamma: float, elitism: int) -> int:
    """The one replacement count, used by :func:`pbt_truncation` and the evolution loop alike:
    n = min(⌈γ·size⌉, size − max(elitism, 1)), and 0 when γ = 0.

    The ceiling forgives float error (γ·size = 3.0000000000000004 counts as 3), and at least
    one member always survives, so children always have a parent from the generation before.

    Args:
        size: members of the role, >= 0.
        gamma: replaced fraction in [0, 1] (0 replaces none).
        elitism: top members never replaced, >= 0.

    Returns:
        n, the number of members replaced: 0 ≤ n ≤ max(size − max(elitism, 1), 0).

    References: PopuLoRA (arXiv 2605.16727) §2 step 7; PBT truncation (arXiv 1711.09846).
    """
    if gamma <= 0:
        return 0
    return max(0, min(_ceil(gamma * size), size - max(elitism, 1)))


def replaced_indices(fitness: Tensor | Sequence[float], gamma: float, elitism: int) -> Tensor:
    """The members a generation replaces: the :func:`num_replaced` worst, worst first.

    Shapes:
        fitness: (P,) → (n,) long indices, n = num_replaced(P, gamma, elitism). Ties: the lower
        index ranks higher, so the later one goes first.

    References: PopuLoRA (arXiv 2605.16727) §2 step 7; PBT truncation (arXiv 1711.09846).
    """
    order = rank_order(_fitness(fitness))
    count = num_replaced(order.numel(), gamma, elitism)
    return order[order.numel() - count :].flip(0).to(_device(fitness))


def _ceil(value: float) -> int:
    """⌈value⌉ that ignores float error below 1e-9 (0.3 · 10 → 3, not 4)."""
    return math.ceil(value - 1e-9)


@register(
    "replacement",
    gamma=Param(0.25, low=0.0, high=1.0, doc="fraction of the population replaced"),
    elitism=Param(1, low=0, high=1_000_000, doc="top individuals never replaced"),
)
def pbt_truncation(
    fitness: Tensor, *, generator: torch.Generator, gamma: float = 0.25, elitism: int = 1
) -> tuple[Tensor, Tensor]:
    """PBT truncation: the bottom ceil(γ·P) are replaced by children of parents from the top.

    n = :func:`num_replaced` (P, γ, elitism) = min(⌈γ·P⌉, P − max(elitism, 1)) (n ≥ 1 when γ > 0 and
    P > max(elitism, 1)): the n worst are replaced, so the top ``elitism`` (and always at least one
    survivor) are never touched. The evolution loop replaces exactly these.
    Parents are drawn uniformly with replacement from the top max(1, ceil(γ·P)) survivors (the
    PBT "exploit" pool), one per replaced slot. Ties: lower index ranks higher.

    Shapes:
        fitness: (P,) → replace_idx: (n,) long, worst first; parent_idx: (n,) long.

    Args:
        gamma: replaced fraction γ in [0, 1].
        elitism: number of top individuals protected, ≥ 0.

    Raises:
        ValueError: bad fitness, gamma outside [0, 1], elitism < 0.

    References:
        Jaderberg et al., "Population Based Training of Neural Networks", arXiv 1711.09846;
        PopuLoRA, arXiv 2605.16727, §2 step 7.
    """
    f = _fitness(fitness)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if isinstance(elitism, bool) or not isinstance(elitism, int) or elitism < 0:
        raise ValueError(f"elitism must be an int ≥ 0, got {elitism!r}")
    size = f.numel()
    wanted = _ceil(gamma * size) if gamma > 0 else 0
    replace = replaced_indices(f, gamma, elitism)  # worst first
    count = replace.numel()
    order = rank_order(f)
    device = _device(fitness)
    if count == 0:
        empty = torch.empty(0, dtype=torch.long, device=device)
        return empty, empty.clone()
    pool = order[: min(max(1, wanted), size - count)]
    parents = pool[_draw(count, pool.numel(), generator)]
    return replace.to(device), parents.to(device)
