"""The evolutionary outer loop: replace the weakest of each role by children made in LoRA weight space.

    for role in population.roles:                             # teacher, student, ...: no names here
        fitness  = μ − 3σ of each member                      # conservative rating
        losers   = bottom ⌈γ·P⌉ (never the top `elitism`)     # PBT truncation (replaced_indices)
        for each loser:
            parents = selection(role or survivors)            # tournament within the role, or lexicase on the exam's cases;
                                                              # one draw each, or dealt by universal sampling (evolution.sampling)
            child   = crossover(parents) w.p. crossover_rate, else mutation(parent)   # (variation stream)
            loser's slot ← child; enter(loser, child)         # League.replace: fresh rating, optimizer

Operators come from the registry by the names in the config (``evolution.selection``,
``evolution.crossover``, ``evolution.mutation``), so a user's own function plugs in.
Source: PopuLoRA (arXiv 2605.16727) §2 step 7 and §3; PBT (arXiv 1711.09846).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from evolora.bank import Bank
from evolora.config import EvolutionConfig
from evolora.config.operator_choice import Operators, resolve_operators
from evolora.operators import universal_selection
from evolora.operators.selection import replaced_indices
from evolora.population import Individual, Population


@dataclass(frozen=True)
class Birth:
    """One replacement: ``child`` took ``replaced``'s slot at ``step`` (a lineage record)."""

    step: int
    role: str
    replaced: str
    child: str
    parents: tuple[str, ...]
    operator: str

    def to_dict(self) -> dict:
        return {
            "step": self.step,
            "role": self.role,
            "replaced": self.replaced,
            "child": self.child,
            "parents": list(self.parents),
            "operator": self.operator,
        }


def evolve(
    bank: Bank,
    population: Population,
    fitness: dict[str, float],
    config: EvolutionConfig,
    *,
    step: int,
    generator: torch.Generator,
    operators: Operators | None = None,
    enter: Callable[[Individual, Individual], None] | None = None,
    selection_generator: torch.Generator | None = None,
    cases: dict[str, torch.Tensor] | None = None,
) -> list[Birth]:
    """Replace the bottom γ of each role of ``population`` by children of the survivors, in place.

    Args:
        bank: the :class:`evolora.bank.local.AdapterBank`; children's factors are written into
            the replaced individuals' slots.
        population: updated in place (replaced individuals swapped for children).
        fitness: {individual id: fitness}, higher is better (the loop passes μ − 3σ).
        config: γ, elitism, crossover rate and operator choices.
        step: current RL step (recorded as the children's birth step).
        generator: the variation stream: the crossover/mutation coin, the crossover and the mutation
            (and selection too when ``selection_generator`` is None).
        selection_generator: the selection stream: every parent choice. With its own stream, a
            change of selection operator changes only the parents: the coins and the operators'
            noise stay the same draws (:mod:`evolora.streams`).
        enter: puts a newborn in its loser's place, ``enter(loser, child)``; the default swaps
            them in ``population`` (the loop passes :meth:`evolora.league.League.replace`, which
            also gives the child a fresh rating and optimizer).
        cases: {individual id: (N,) per-case scores, higher is better} (an exam's outcomes of each
            solver on the same N problems); a selection operator that takes ``cases`` (lexicase) gets
            the parent pool's (P, N) table when every member of the pool has one, else None.

    Returns:
        The births, in order.
    """
    operators = operators or resolve_operators(config)
    plans = [_plan(population.role(role), fitness, config) for role in population.roles]
    bank.prefetch([m.slot for losers, pool, _ in plans if losers for m in pool])  # Ray: one call per worker
    births = []
    for role, (losers, pool, pool_fitness) in zip(population.roles, plans):
        scores = Scores(pool_fitness, _pool_cases(pool, cases or {}))
        own = operators.for_role(role)  # evolution.roles.<role>, else the section's operators
        # Make every child from the pre-evolution pool before any slot is overwritten.
        litter = _Litter(bank, pool, scores, config, own, generator, selection_generator or generator)
        children = litter.children(len(losers))
        for loser, (child, parents, name) in zip(losers, children):
            bank.set_factors(loser.slot, child)
            newborn = population.new_individual(
                role, loser.slot, parents=tuple(p.id for p in parents), operator=name, born_step=step
            )
            (enter or population.replace)(loser, newborn)
            births.append(Birth(step, role, loser.id, newborn.id, newborn.parents, name))
    return births


def _plan(members: list[Individual], fitness: dict[str, float], config: EvolutionConfig) -> tuple:
    """(losers, parent pool, the pool's fitness) of one role's ``members``; no random draws."""
    values = torch.tensor([fitness[m.id] for m in members], dtype=torch.float64, device="cpu")  # host: P numbers
    # The losers of the registered pbt_truncation rule (ties: the later slot goes first);
    # parents come from ``evolution.selection``, not from PBT's exploit pool.
    replace = replaced_indices(values, config.gamma, config.elitism)
    losers = [members[i] for i in replace.flip(0).tolist()]
    lost = set(replace.tolist())
    survivors = sorted((i for i in range(len(members)) if i not in lost), key=lambda i: (-values[i].item(), i))
    pool = members if config.parent_pool == "role" else [members[i] for i in survivors]
    return losers, pool, torch.tensor([fitness[m.id] for m in pool], dtype=torch.float64, device="cpu")


def _pool_cases(pool: list[Individual], cases: dict[str, torch.Tensor]) -> torch.Tensor | None:
    """The pool's (P, N) case table in pool order, or None unless every member has the same N ≥ 1
    cases (an exam without problems has none)."""
    rows = [cases.get(m.id) for m in pool]
    if not rows or any(row is None for row in rows):
        return None
    sizes = {row.numel() for row in rows}
    if len(sizes) != 1 or 0 in sizes:  # members examined on different problems, or no problem at all
        return None
    return torch.stack([row.to(torch.float64).cpu() for row in rows])


@dataclass(frozen=True)
class Scores:
    """What selection reads of a parent pool: ``fitness`` (P,) and ``cases`` (P, N) or None."""

    fitness: torch.Tensor
    cases: torch.Tensor | None

    def select(self, operators: Operators, num: int, generator: torch.Generator) -> list[int]:
        """``num`` parent indices from ``evolution.selection``; ``cases`` go to an operator that takes them."""
        spec, params = operators.selection
        return spec.select(self.fitness, num, generator=generator, cases=self.cases, **params).tolist()

    def deal(self, operators: Operators, num: int, generator: torch.Generator) -> list[int]:
        """``num`` parent indices by stochastic universal sampling over ``evolution.selection``'s exact
        chances (:func:`evolora.operators.universal`), in random order.

        Raises:
            ValueError: a selection without exact chances (refused when the config loads).
        """
        spec, params = operators.selection
        return universal_selection(
            spec.name, self.fitness, num, generator=generator, params=params, cases=self.cases
        ).tolist()


@dataclass(frozen=True)
class _Litter:
    """What one role's children at an event are made from: the pre-event ``pool``, its ``scores`` and
    the role's ``operators``; coins, crossovers and mutations draw from ``generator``, parents from
    ``selector``."""

    bank: Bank
    pool: list[Individual]
    scores: Scores
    config: EvolutionConfig
    operators: Operators
    generator: torch.Generator
    selector: torch.Generator

    def children(self, count: int) -> list:
        """``count`` (child, parents, operator name). Independent sampling: each child's coin, then its
        parents, then its crossover or mutation. Universal: every coin first, then all the parents the
        coins call for in one deal (:meth:`Scores.deal`), then each child's crossover or mutation."""
        if self.config.sampling != "universal":
            return [
                self._breed(self.scores.select(self.operators, self._parents(), self.selector)) for _ in range(count)
            ]
        sizes = [self._parents() for _ in range(count)]
        picks = iter(self.scores.deal(self.operators, sum(sizes), self.selector))
        return [self._breed([next(picks) for _ in range(size)]) for size in sizes]

    def _parents(self) -> int:
        """How many parents the next child has: 2 (crossover) when one uniform draw of ``generator`` is
        under ``crossover_rate`` and the pool holds two, else 1 (mutation)."""
        draw = torch.rand((), generator=self.generator, device=self.generator.device).item()
        return 2 if len(self.pool) >= 2 and draw < self.config.crossover_rate else 1

    def _breed(self, index: list[int]):
        """(child, parents, operator name) from the parents at ``index`` of the pool: two make a
        crossover child (a repeated parent is replaced by the best other member), one a mutated copy."""
        fitness, generator = self.scores.fitness, self.generator
        if len(index) == 2:
            if index[0] == index[1]:  # a crossover needs two distinct parents: take the best other one
                others = [i for i in range(len(self.pool)) if i != index[0]]
                index[1] = max(others, key=lambda i: (fitness[i].item(), -i))
            parents = [self.pool[i] for i in index]
            spec, params = self.operators.crossover
            child = spec.fn(
                [self.bank.get_factors(p.slot) for p in parents],
                [fitness[i].item() for i in index],
                generator=generator,
                **params,
            )
            name = spec.name
            if self.config.mutate_after_crossover:
                mutation, mutation_params = self.operators.mutation
                child = mutation.fn(child, generator=generator, **mutation_params)
                name = f"{name}+{mutation.name}"
            return child, parents, name
        parent = self.pool[index[0]]
        spec, params = self.operators.mutation
        return spec.fn(self.bank.get_factors(parent.slot), generator=generator, **params), [parent], spec.name
