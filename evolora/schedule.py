"""Learning-rate schedules over a run's RL steps (one value per step, shared by every adapter).

A child born by evolution starts with a fresh AdamW but follows the run's schedule from its
birth step on, as its parents would have.
"""

from __future__ import annotations

import math
from typing import get_args

from evolora.config.types import LRSchedule


def scheduled_lr(lr: float, step: int, steps: int, schedule: str = "constant", final: float = 0.1) -> float:
    """The learning rate of RL step ``step`` (1-based) of a run of ``steps`` steps.

    ``constant``: ``lr`` at every step. ``cosine``: half a cosine from ``lr`` at step 1 to
    ``final * lr`` at step ``steps`` (SGDR without restarts, Loshchilov & Hutter,
    arXiv 1608.03983); steps past ``steps`` (a resumed run that was extended) stay at
    ``final * lr``. Units: those of ``lr`` (AdamW step size, > 0); ``final`` in [0, 1].

    Raises:
        ValueError: an unknown schedule, ``step`` < 1, ``steps`` < 1 or ``final`` outside [0, 1].
    """
    if schedule not in get_args(LRSchedule):
        raise ValueError(f"unknown learning-rate schedule {schedule!r}; use 'constant' or 'cosine'")
    if step < 1 or steps < 1:
        raise ValueError(f"step ({step}) and steps ({steps}) must be >= 1")
    if not 0.0 <= final <= 1.0:
        raise ValueError(f"final must be a fraction of lr in [0, 1], got {final}")
    if schedule == "constant":
        return lr
    progress = min(step - 1, steps - 1) / max(steps - 1, 1)
    return lr * (final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * progress)))


def set_lr(optimizers, lr: float) -> None:
    """Set every parameter group of each optimizer in ``optimizers`` to ``lr`` (in place)."""
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["lr"] = lr


__all__ = ["scheduled_lr", "set_lr"]
