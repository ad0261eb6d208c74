"""``evolution.fitness``: what the outer loop ranks the members of a role by.

    evolution:
      fitness: rating                                   # μ − 3σ (the paper's; the default)
      fitness: validation                               # greedy accuracy on the task's dev set
      fitness: {name: blend, weight: 0.5, size: 36}     # 0.5·z(validation) + 0.5·z(rating), per role

Source: PopuLoRA (arXiv 2605.16727) §3 (fitness from the conservative rating); the validation
fitness (a dev set from the training distribution, never the held-out items) is evolora's own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from evolora.config.types import Float, Int, _Section

FitnessName = Literal["rating", "validation", "blend"]
"""``evolution.fitness.name``: ``rating`` (μ − 3σ), ``validation`` (dev-set accuracy of the solving
role) or ``blend`` (their within-role z-scores mixed by ``weight``)."""


class FitnessConfig(_Section):
    """How each member's fitness is computed at an evolution event (:mod:`evolora.fitness`).

    A bare name is accepted: ``evolution.fitness: validation`` is ``{name: validation}``.
    """

    name: FitnessName = "rating"
    """``rating``: the conservative rating μ − 3σ. ``validation``: greedy accuracy on ``size``
    problems of the task's dev set (drawn from the training distribution, disjoint from the
    held-out items), for the solving role; other roles (teachers, critics) keep μ − 3σ.
    ``blend``: ``weight``·z(validation) + (1 − ``weight``)·z(rating), z-scored within the role."""
    size: Int = Field(default=36, ge=1, le=1000)
    """Dev problems per evaluation (greedy, one batched call for every solver). Ignored by ``rating``.
    Members of one short arith run differ on a few percent of problems, so 36 resolve little: the
    population-size study expects roughly 150–200 for a within-run rank correlation of 0.5 with
    held-out accuracy (docs/results/population-size.md)."""
    weight: Float = Field(default=0.5, ge=0, le=1)
    """``blend`` only: the weight of the validation z-score (0 = rating only, 1 = validation only)."""

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @property
    def needs_dev_set(self) -> bool:
        """True when the fitness reads dev-set accuracy (``validation`` or ``blend``)."""
        return self.name != "rating"
