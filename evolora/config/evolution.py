"""The ``evolution`` section: when the outer loop acts, how hard, by which fitness and operators.

    evolution: {every: 5, gamma: 0.5, elitism: 1, fitness: exam, child_rating: inherit,
                selection: tournament, crossover: svd_merge, mutation: {name: lowrank_gaussian, params: {sigma: 0.1}}}

Source: PopuLoRA (arXiv 2605.16727) §2 step 7 and §3; the exam fitness, inherited ratings and the
audit are evolora's own (docs/results/evolution.md).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from evolora.config.fitness import FitnessConfig
from evolora.config.types import Float, Int, _Section

Sampling = Literal["independent", "universal"]
"""How an event draws a role's parents (``evolution.sampling``; DEAP's ``make_toolbox(sampling=)``)."""


class OperatorChoice(_Section):
    """An operator and its parameters: ``{name: tournament, params: {size: 3}}``, or the bare name
    (``truncation``, ``--set evolution.selection=truncation``) for its defaults."""

    name: str
    """A registered operator name, or ``package.module:function`` for a user function."""
    params: dict[str, Any] = Field(default_factory=dict)
    """The operator's parameters; omitted ones take their defaults (``evolora operators`` and the
    operator table of the configuration reference list names, defaults and ranges)."""

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value


class RoleOperators(_Section):
    """One role's own operators under ``evolution.roles.<role>``; a kind left out is the section's."""

    selection: OperatorChoice | None = None
    """The role's parent selection (None: ``evolution.selection``)."""
    crossover: OperatorChoice | None = None
    """The role's crossover (None: ``evolution.crossover``)."""
    mutation: OperatorChoice | None = None
    """The role's mutation (None: ``evolution.mutation``)."""


class EvolutionConfig(_Section):
    enabled: bool = True
    """False: the outer loop never runs (no selection, crossover or mutation); the members learn by RL
    only. With ``selfplay.mode: population`` this is the ``no_evolution`` ablation of a study."""
    every: Int = Field(default=10, ge=1)
    """Evolve every k RL steps (paper reconstruction: 10)."""
    gamma: Float = Field(default=0.25, ge=0, le=1)
    """Share of each role replaced per evolution event: the bottom ⌈γ·P⌉ by fitness (at least one,
    never the top ``elitism``). With ``every`` (events = ⌊(steps − 1) / every⌋ unless
    ``at_last_step``) and the mutation's ``params.sigma`` (its strength), this is how hard the
    outer loop acts (docs/concepts/index.md)."""
    elitism: Int = Field(default=1, ge=0)
    """Top individuals per role never replaced."""
    crossover_rate: Float = Field(default=0.5, ge=0, le=1)
    """Probability a child comes from crossover (else from mutation)."""
    parent_pool: Literal["role", "survivors"] = "role"
    """Parents are selected from the whole role (before replacement) or from the survivors only."""
    sampling: Sampling = "independent"
    """How an event draws a role's m parents: ``independent``, each one draw of the selection;
    ``universal``, stochastic universal sampling over each member's exact chance
    (:func:`evolora.operators.universal`), so a member of chance p is a parent ⌊m·p⌋ or ⌈m·p⌉ times
    and the realised selection differential strays less from its expectation. ``universal``
    needs a selection whose chances are known exactly (tournament, truncation, rank,
    fitness_proportional, lexicase; not lexicase on the students' ``logprob`` exam cases with
    ε > 0, or on their 0/1 outcomes with ε ≥ 1) and draws a role's crossover coins before its
    parents. With lexicase, computing the exact chances takes about 2 s per event at 16 students on
    100 problems and grows quickly beyond (a recursion over the sets of members left)."""
    mutate_after_crossover: bool = False
    """Also mutate crossover children."""
    at_last_step: bool = False
    """Also evolve at the run's last step (``run.steps``). Off by default: children born then are
    evaluated without a single update or game, and with 2 members per role the final pair was a
    survivor and its mutated copy (ΔW diversity 0.016, docs/results/benchmarks.md)."""
    selection: OperatorChoice = OperatorChoice(name="tournament")
    crossover: OperatorChoice = OperatorChoice(name="svd_merge")
    mutation: OperatorChoice = OperatorChoice(name="lowrank_gaussian")
    roles: dict[str, RoleOperators] = Field(default_factory=dict)
    """Operators of one role of its own, e.g. ``{student: {selection: lexicase}}`` (students choose
    parents problem by problem on the exam, teachers keep ``evolution.selection``); every role not
    named, and every kind a role leaves out, uses the three above."""
    fitness: FitnessConfig = FitnessConfig()
    """What members are ranked by: rating (μ − 3σ), validation (dev accuracy), blend, or exam (a common
    exam of recent self-play problems) (:mod:`evolora.config.fitness`)."""
    child_rating: Literal["inherit", "fresh"] = "inherit"
    """A child's rating: ``inherit``, its parents' mean μ, σ and Elo (σ at most the initial σ), so a
    newborn does not rank low by μ − 3σ for being new; ``fresh``, the initial rating (the paper's)."""
    audit: Int = Field(default=0, ge=0)
    """> 0: at each event, before selection, also measure every solver's greedy accuracy on the first
    ``audit`` held-out items, so the event record holds the selection differential on held-out
    accuracy (the study's check that selection acts; the items are never used to select)."""
