"""Pure LoRA weight-space operators (torch only): selection, replacement, crossover, mutation.

An adapter is ``dict[str, (A: (r, d_in), B: (d_out, r))]`` with ΔW = B @ A. Every operator is a
pure function (new tensors, inputs untouched) taking an explicit ``generator``; all built-ins are
registered in :data:`REGISTRY` under their function name::

    from evolora.operators import REGISTRY
    params = REGISTRY.validate("crossover", "svd_merge", {"weights": "fitness"})
    child = REGISTRY.get("crossover", "svd_merge").fn([p0, p1], [0.3, 0.7], generator=g, **params)

References: PopuLoRA, arXiv 2605.16727, §3.
"""

from .adapter import Adapter, check_adapter, check_parents, clone_adapter, delta_weight, map_modules
from .chances import require_exact, selection_chances
from .crossover import clone, dare, extrapolate, layer_swap, merge_weights, midpoint, slerp, svd_merge, svd_splice, ties
from .diversity import delta_distance, delta_norm, population_diversity
from .lexicase import case_epsilon, lexicase, lexicase_chances
from .lowrank import (
    best_rank_r,
    dense_refactor,
    factors_from_svd,
    frobenius_inner,
    randomized_refactor,
    refactor,
    svd_factors,
    weighted_sum_lowrank,
)
from .mutation import component_mask, gaussian, layer_gaussian, lowrank_gaussian, spectral
from .registry import KINDS, REGISTRY, DescribeRow, OperatorSpec, Param, Registry, register
from .sampling import independent_spread, universal, universal_selection, universal_spread
from .selection import fitness_proportional, pbt_truncation, rank, rank_order, tournament, truncation

__all__ = [
    "Adapter",
    "check_adapter",
    "check_parents",
    "clone_adapter",
    "delta_weight",
    "map_modules",
    "best_rank_r",
    "dense_refactor",
    "factors_from_svd",
    "frobenius_inner",
    "randomized_refactor",
    "refactor",
    "svd_factors",
    "weighted_sum_lowrank",
    "delta_distance",
    "delta_norm",
    "population_diversity",
    "KINDS",
    "REGISTRY",
    "DescribeRow",
    "OperatorSpec",
    "Param",
    "Registry",
    "register",
    "lexicase",
    "universal",
    "universal_selection",
    "independent_spread",
    "universal_spread",
    "case_epsilon",
    "lexicase_chances",
    "selection_chances",
    "require_exact",
    "svd_merge",
    "layer_swap",
    "svd_splice",
    "dare",
    "ties",
    "extrapolate",
    "slerp",
    "clone",
    "midpoint",
    "merge_weights",
    "lowrank_gaussian",
    "spectral",
    "layer_gaussian",
    "component_mask",
    "gaussian",
    "tournament",
    "truncation",
    "fitness_proportional",
    "rank",
    "rank_order",
    "pbt_truncation",
]
