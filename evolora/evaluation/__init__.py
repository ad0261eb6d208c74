"""Held-out evaluation: greedy accuracy of adapters (and the bare base) on a task's test set
(:mod:`evolora.evaluation.held_out`), sampled pass@k (:mod:`evolora.evaluation.sampled`), the
family set (:mod:`evolora.evaluation.family`) and re-evaluation of finished runs
(:mod:`evolora.evaluation.rerun`).
"""

from __future__ import annotations

from evolora.evaluation.held_out import (
    EVAL_POSITIONS_PER_ROW,
    EvalResult,
    evaluate,
    held_out_accuracy,
    held_out_curve,
    row_chunks,
)
from evolora.generation.routed import BASE

__all__ = [
    "BASE",
    "EVAL_POSITIONS_PER_ROW",
    "EvalResult",
    "evaluate",
    "held_out_accuracy",
    "held_out_curve",
    "row_chunks",
]
