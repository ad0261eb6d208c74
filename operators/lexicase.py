"""Lexicase selection: parents chosen case by case, so a specialist on a few problems can breed.

    for each parent:                                   # num independent draws
        pool  = every member
        for case in a random order of the N cases:     # e.g. the exam's problems
            pool = members of pool within ε of the pool's best on this case
            stop when one is left
        parent = a uniform draw from pool

A fitness vector averages every case into one number, so two students with the same exam accuracy
rank equal even when they solve different problems. Lexicase keeps the cases apart: on 0/1 outcomes
a member that alone solves some problem is chosen whenever that problem comes first, and a member
beaten on every case by another is never chosen. In evolora the cases are an exam's member × problem
outcomes (``evolution.fitness: exam``, :mod:`evolora.exam`); a role without them (teachers, or
another fitness) is selected on its fitness as the only case: with the default ε, uniformly among
the members within that one case's median absolute deviation of the best.

Source: lexicase selection and its ε variant from genetic programming, applied by evolora to the
exam record (docs/concepts/index.md, "The operators").
"""

from __future__ import annotations

import torch
from torch import Tensor

from .registry import Param, register
from .selection import _check_num, _device, _fitness

__all__ = ["lexicase", "case_epsilon", "lexicase_chances"]


def _cases(fitness: Tensor, cases: Tensor | None) -> Tensor:
    """The (P, N) float64 CPU case table: ``cases``, or ``fitness`` as the only case."""
    if cases is None:
        return fitness[:, None]
    table = torch.as_tensor(cases, device="cpu").to(torch.float64)
    if table.ndim != 2 or table.shape[0] != fitness.numel() or table.shape[1] == 0:
        raise ValueError(
            f"cases must be (P, N) with P = {fitness.numel()} members and N ≥ 1 cases, got shape {tuple(table.shape)}"
        )
    if torch.isnan(table).any():
        raise ValueError("cases contain NaN; score a missing outcome as a failure (0) before selection")
    return table


def case_epsilon(cases: Tensor) -> Tensor:
    """Each case's median absolute deviation over the members: the automatic ε of ε-lexicase.

    Shapes:
        cases: (P, N) → (N,) float64, ≥ 0, in the cases' units.

    The median is the midpoint of the two middle values for even P, so on 0/1 outcomes split two
    against two ε is 0.5: only the members that solved the case stay (any ε < 1 does that).
    """
    table = torch.as_tensor(cases, device="cpu").to(torch.float64)
    median = table.quantile(0.5, dim=0)
    return (table - median).abs().quantile(0.5, dim=0)


@register(
    "selection",
    epsilon=Param(
        None,
        low=0.0,
        doc="tolerance per case, case units; None: each case's median absolute deviation (ε-lexicase)",
    ),
)
def lexicase(
    fitness: Tensor,
    num: int,
    *,
    generator: torch.Generator,
    cases: Tensor | None = None,
    epsilon: float | None = None,
) -> Tensor:
    """Lexicase selection over per-case scores, e.g. the exam's outcomes (without them, the fitness), ``num`` draws.

    Each draw shuffles the N cases and, case by case, keeps the members within ε of the best
    remaining member on that case, until one member is left or the cases run out; the parent is then
    a uniform draw among those left. With ε = 0 (and on 0/1 outcomes with the default ε), a member
    beaten on every case by some other member is never chosen, and one alone best on some case is
    chosen with probability ≥ 1/N per draw. With ε > 0 a member within ε of the best on a case counts
    as tied there, so on continuous scores neither holds: the price of not letting tiny differences
    decide.

    Shapes:
        fitness: (P,); cases: (P, N) or None → (num,) long indices in [0, P).

    Args:
        fitness: (P,) fitness, higher is better; the only case when ``cases`` is None.
        num: number of selected parents, ≥ 0.
        generator: the torch generator of the case orders and the final uniform draws.
        cases: (P, N) per-case scores, higher is better (an exam's 0/1 outcomes, or per-problem
            log-probabilities); passed by the outer loop, not a config parameter.
        epsilon: one tolerance for every case, in the cases' units (0: plain lexicase, only the best
            stay); None: :func:`case_epsilon`, each case's own median absolute deviation over the P
            members (ε-lexicase for continuous scores; on 0/1 outcomes it keeps only the solvers).

    Raises:
        ValueError: empty/non-1-D/NaN fitness, cases of another P, without cases or with NaN,
            num < 0, an epsilon that is not a number ≥ 0.

    References:
        Lexicase and ε-lexicase selection from genetic programming, as docs/concepts/index.md
        ("The operators") states them.
    """
    f = _fitness(fitness)
    _check_num(num)
    table = _cases(f, cases)
    tolerance = case_epsilon(table) if epsilon is None else _tolerance(epsilon, table.shape[1])
    chosen = [_one_draw(table, tolerance, generator) for _ in range(num)]
    return torch.tensor(chosen, dtype=torch.long, device="cpu").to(_device(fitness))


def lexicase_chances(fitness: Tensor, cases: Tensor | None = None, epsilon: float | None = None) -> Tensor:
    """The exact chance that one :func:`lexicase` draw picks each member.

    Exact where a case once used never splits the survivors again: with ε = 0, on 0/1 outcomes
    with any ε < 1 (the default's), or with one case (no cases: the fitness). Then the next case
    that splits the survivors is uniform over all cases that split them, so
    P(i | A) = Σ_c [c splits A] / n_A · P(i | A ∩ best_c(A)), and a set no case splits is drawn
    from uniformly (memoised over the survivor sets reached).

    Shapes:
        fitness: (P,); cases: (P, N) or None (the fitness as the only case) → (P,) float64, sums to 1.

    Raises:
        ValueError: as :func:`lexicase`, or a tolerance under which no exact form holds here.
    """
    table = _cases(_fitness(fitness), cases)
    tolerance = case_epsilon(table) if epsilon is None else _tolerance(epsilon, table.shape[1])
    binary = bool(((table == 0) | (table == 1)).all())
    single = table.shape[1] == 1  # one case splits once: its best among its survivors is the same
    if not (single or bool((tolerance == 0).all()) or (binary and bool((tolerance < 1).all()))):
        raise ValueError("exact lexicase chances need one case, ε = 0, or 0/1 outcomes with ε < 1")
    columns = [(table[:, c].tolist(), float(tolerance[c])) for c in range(table.shape[1])]
    memo: dict[frozenset, dict[int, float]] = {}

    def chances(alive: frozenset) -> dict[int, float]:
        if alive not in memo:
            kept = []
            for values, tol in columns:
                best = max(values[i] for i in alive)
                survivors = frozenset(i for i in alive if values[i] >= best - tol)
                if survivors != alive:
                    kept.append(survivors)
            if not kept or len(alive) == 1:
                memo[alive] = {i: 1.0 / len(alive) for i in alive}
            else:
                total: dict[int, float] = {}
                for survivors in kept:
                    for i, p in chances(survivors).items():
                        total[i] = total.get(i, 0.0) + p / len(kept)
                memo[alive] = total
        return memo[alive]

    result = torch.zeros(table.shape[0], dtype=torch.float64, device="cpu")
    for i, p in chances(frozenset(range(table.shape[0]))).items():
        result[i] = p
    return result


def _tolerance(epsilon, cases: int) -> Tensor:
    """(N,) copies of ``epsilon``, a number ≥ 0 (ValueError otherwise)."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not epsilon >= 0:
        raise ValueError(f"epsilon must be a number ≥ 0 (one tolerance for every case) or None, got {epsilon!r}")
    return torch.full((cases,), float(epsilon), dtype=torch.float64, device="cpu")


def _one_draw(table: Tensor, tolerance: Tensor, generator: torch.Generator) -> int:
    """One lexicase parent of the (P, N) ``table`` with (N,) ``tolerance``: an index in [0, P)."""
    alive = torch.ones(table.shape[0], dtype=torch.bool, device="cpu")
    order = torch.randperm(table.shape[1], generator=generator, device=generator.device).tolist()
    for case in order:
        column = table[:, case]
        best = column[alive].max()
        alive &= column >= best - tolerance[case]
        if int(alive.sum()) == 1:
            break
    left = alive.nonzero().flatten()
    pick = torch.randint(left.numel(), (1,), generator=generator, device=generator.device).item()
    return int(left[pick])
