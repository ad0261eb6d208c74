"""``evolution.fitness``: what the outer loop ranks the members of a role by.

    evolution:
      fitness: rating                                   # μ − 3σ (the paper's; the default)
      fitness: validation                               # greedy accuracy on the task's dev set
      fitness: {name: blend, weight: 0.5, size: 36}     # 0.5·z(validation) + 0.5·z(rating), per role
      fitness: {name: exam, problems: 64, size: 64}     # every member of a role on one common exam

Source: PopuLoRA (arXiv 2605.16727) §3 (fitness from the conservative rating); the validation
fitness (a dev set from the training distribution, never the held-out items) is evolora's own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from evolora.config.types import Float, Int, _Section

FitnessName = Literal["rating", "validation", "blend", "exam"]
"""``evolution.fitness.name``: ``rating`` (μ − 3σ), ``validation`` (dev-set accuracy of the solving
role), ``blend`` (their within-role z-scores mixed by ``weight``) or ``exam`` (a common exam of
recent self-play problems, :mod:`evolora.exam`)."""

ExamScore = Literal["accuracy", "logprob"]
"""``evolution.fitness.score``: how a solver's exam is scored: greedy ``accuracy``, or ``logprob``,
the mean per-token log-probability of the verified worked answer (continuous: it separates
members that solve the same problems)."""


class FitnessConfig(_Section):
    """How each member's fitness is computed at an evolution event (:mod:`evolora.fitness`).

    A bare name is accepted: ``evolution.fitness: validation`` is ``{name: validation}``.
    """

    name: FitnessName = "rating"
    """``rating``: the conservative rating μ − 3σ. ``validation``: greedy accuracy on ``size``
    problems of the task's dev set (drawn from the training distribution, disjoint from the
    held-out items), for the solving role; other roles (teachers, critics) keep μ − 3σ.
    ``blend``: ``weight``·z(validation) + (1 − ``weight``)·z(rating), z-scored within the role.
    ``exam``: at each evolution event every member of a role sits the same exam in one batched
    greedy call: up to ``problems`` recent valid teacher problems plus ``size`` dev problems
    (``top_up``). Solvers score ``score`` on it; teachers score the share of their proposals since
    the last event that were valid and separate the solvers (solved by some, not all); critics keep
    μ − 3σ. Every member × problem outcome goes into the step record (:mod:`evolora.exam`)."""
    size: Int = Field(default=36, ge=1, le=1000)
    """Dev problems per evaluation (greedy, one batched call for every solver). Ignored by ``rating``.
    Members of one short arith run differ on a few percent of problems, so 36 resolve little: the
    population-size study expects roughly 150–200 for a within-run rank correlation of 0.5 with
    held-out accuracy (docs/results/population-size.md)."""
    problems: Int = Field(default=64, ge=1, le=4096)
    """``exam`` only: the most recent valid, distinct teacher problems on the exam (taken in turn from
    each teacher, newest first, since the last event)."""
    top_up: bool = True
    """``exam`` only: also put ``size`` problems of the task's dev set on the exam (the same at every
    event, so events compare). Off: the exam is self-play problems only."""
    score: ExamScore = "accuracy"
    """``exam`` only: a solver's score: ``accuracy`` (greedy, in [0, 1]) or ``logprob`` (mean
    per-token log-probability of each problem's worked answer, nats, <= 0; needs a task with
    reference solutions). Both are recorded at every event whichever ranks."""
    weight: Float = Field(default=0.5, ge=0, le=1)
    """``blend`` only: the weight of the validation z-score (0 = rating only, 1 = validation only)."""

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @property
    def needs_dev_set(self) -> bool:
        """True when the fitness reads dev-set problems (``validation``, ``blend``, or ``exam`` with ``top_up``)."""
        return self.name in ("validation", "blend") or (self.name == "exam" and self.top_up)
