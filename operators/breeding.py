"""The breeder's equation of one evolution event, and the exam scores a fitness is made of.

    S  = mean over parent draws of (f_parent − f̄)        # selection differential, at the event
    R  = mean over children of (f_child − f̄')            # response, at the next event (f̄': the role then)
    h² = R / S                                           # realized heritability

Deviations are taken from the role's mean on the same exam, so a change of exam difficulty or of
every member's skill between events (the RL steps) cancels out. A parent chosen for two children
counts twice in S, as in quantitative genetics.

Exam scores (one role sits the same problems): a solver's accuracy is the mean of its row of the
member × problem outcome matrix; a problem *separates* the solvers when some but not all solve it.

Source: Falconer & Mackay, Introduction to Quantitative Genetics (1996), ch. 11 (R = h² S);
PopuLoRA (arXiv 2605.16727) §3 (fitness from self-play outcomes).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def selection_differential(values: Tensor, parents: Tensor) -> float:
    """S: the mean of the chosen parents' values minus the role's mean.

    Shapes:
        values: (P,) one value per member of the role (any unit: accuracy, rating, ...).
        parents: (C,) int64 indices into ``values``, one per parent draw (a crossover child
            draws two); repeats count each time.

    Returns:
        S in the unit of ``values``; nan when ``parents`` is empty or a value is not finite.

    Raises:
        ValueError: ``values`` not 1-D, or an index outside [0, P).
    """
    _check_values(values)
    if parents.numel() and (int(parents.min()) < 0 or int(parents.max()) >= values.numel()):
        raise ValueError(f"parent indices must lie in [0, {values.numel()}), got {parents.tolist()}")
    if not parents.numel():
        return math.nan
    return float(values[parents].double().mean() - values.double().mean())


def deviation(values: Tensor, chosen: Tensor) -> float:
    """The mean of ``values[chosen]`` minus the mean of ``values``: a group's standing in its role.

    The response R is the deviation of the children at the next event; the deviation of the
    replaced members at the event is what their slots stood at before.

    Shapes:
        values: (P,); chosen: (C,) int64 indices into ``values``.

    Returns:
        The deviation in the unit of ``values``; nan when ``chosen`` is empty.

    Raises:
        ValueError: as :func:`selection_differential`.
    """
    return selection_differential(values, chosen)


def heritability(response: float, differential: float, *, tolerance: float = 1e-12) -> float:
    """h² = R / S, the realized heritability; nan when |S| <= ``tolerance`` or either is nan."""
    if not (math.isfinite(response) and math.isfinite(differential)) or abs(differential) <= tolerance:
        return math.nan
    return response / differential


def solve_rates(outcomes: Tensor) -> Tensor:
    """Each solver's accuracy on the exam.

    Shapes:
        outcomes: (P, N) in {0, 1} (float or bool): member p solved problem n.

    Returns:
        (P,) float64 in [0, 1]; nan for every member when N = 0.

    Raises:
        ValueError: ``outcomes`` is not 2-D.
    """
    if outcomes.dim() != 2:
        raise ValueError(f"outcomes must be (members, problems), got shape {tuple(outcomes.shape)}")
    if outcomes.shape[1] == 0:
        return torch.full((outcomes.shape[0],), math.nan, dtype=torch.float64, device=outcomes.device)
    return outcomes.double().mean(dim=1)


def separating(outcomes: Tensor) -> Tensor:
    """Which problems separate the solvers: solved by at least one and not by all.

    Shapes:
        outcomes: (P, N) in {0, 1}.

    Returns:
        (N,) bool; all False when P < 2.

    Raises:
        ValueError: ``outcomes`` is not 2-D.
    """
    if outcomes.dim() != 2:
        raise ValueError(f"outcomes must be (members, problems), got shape {tuple(outcomes.shape)}")
    solved = outcomes.bool().sum(dim=0)
    return (solved > 0) & (solved < outcomes.shape[0])


def _check_values(values: Tensor) -> None:
    if values.dim() != 1:
        raise ValueError(f"values must be 1-D (one per member), got shape {tuple(values.shape)}")
