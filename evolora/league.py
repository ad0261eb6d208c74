"""The league: every individual of a run with its rating, optimizer, lineage and game tally,
the hall of fame of frozen champions, and the one way a newborn enters.

    league = League(population, new_optimizer)    # founders: fresh ratings and optimizers, lineage at step 0
    league.replace(old, child, step)              # one birth: the child takes old's slot, a fresh rating
                                                  #   and optimizer, and a lineage entry
    league.evolve(bank, evolution, ...)           # the outer loop's births, each through replace
    league.cull(member, bank, good, ...)          # a non-finite member's replacement, through replace

A member's adapter factors live in the :class:`evolora.bank.local.AdapterBank`; the league
holds everything else about it, so births from evolution and from culling cannot drift apart.
The name follows the AlphaStar league (a population of agents, their ratings and past
champions as frozen opponents).

Source: PopuLoRA (arXiv 2605.16727) §2 step 7 (a child replaces the weakest of its role and
starts with a fresh rating); Vinyals et al., Nature 575 (2019) (league, hall of fame).
"""

from __future__ import annotations

from typing import Callable

import torch

from evolora.bank import Bank
from evolora.evolution import Birth, evolve
from evolora.matchmaking import HallOfFame
from evolora.population import Individual, Population
from evolora.ratings import Ratings

OptimizerFactory = Callable[[str], torch.optim.Optimizer]
"""Builds a fresh optimizer over one bank slot's parameters (the slot name in, the optimizer out)."""


class League:
    """The members of a run and what the loop keeps per member (PopuLoRA arXiv 2605.16727 §2).

    Args:
        population: the founders (each gets a fresh rating, optimizer and a lineage entry at step 0).
        new_optimizer: builds a fresh optimizer for a bank slot (used for founders and newborns).
        hall_capacity: frozen champion snapshots kept (0: no hall of fame); their bank slots
            are ``H0``, ``H1``, ...

    Attributes:
        population, ratings: the members and their TrueSkill/Elo ratings (ids as keys).
        optimizers: {member id: its optimizer}. lineage: one entry per individual ever born
            (``Individual.to_dict()`` plus ``step``). tally: {id: games played}, attempts/correct
            when it solved, proposals/valid when it proposed, reviews/agreed/format when it judged.
            hall, hall_slots: the hall of fame (None when off) and {snapshot id: its bank slot}.
    """

    def __init__(
        self,
        population: Population,
        new_optimizer: OptimizerFactory,
        *,
        hall_capacity: int = 0,
        child_rating: str = "fresh",
    ):
        self.population = population
        self.child_rating = child_rating  # "inherit": a newborn starts at its parents' ratings (evolution.child_rating)
        self._elders: Ratings | None = None  # the ratings before an evolution event (parents replaced during it)
        self.ratings = Ratings()
        for member in population.members:
            self.ratings.add(member.id)
        self._new_optimizer = new_optimizer
        self.optimizers = {m.id: new_optimizer(m.slot) for m in population.members}
        self.lineage: list[dict] = [dict(m.to_dict(), step=0) for m in population.members]
        self.tally: dict[str, dict[str, int]] = {}
        self.hall = HallOfFame(hall_capacity) if hall_capacity else None
        self.hall_slots: dict[str, str] = {}

    # -- births ------------------------------------------------------------------------------
    def replace(self, old: Individual, child: Individual, step: int) -> None:
        """The one birth rule: ``child`` takes ``old``'s place (its slot already holds the child's
        factors), with a fresh optimizer, a rating (fresh, or its parents' as they stood before the
        event when ``child_rating`` is ``"inherit"``), and joins the lineage at ``step``.

        Raises:
            ValueError: ``old`` is not a member; KeyError: ``old`` has no rating.
        """
        self.population.replace(old, child)
        parents = child.parents if self.child_rating == "inherit" else ()
        elders = self._elders if self._elders is not None else Ratings.from_state_dict(self.ratings.state_dict())
        self.ratings.remove(old.id)  # the parents as they stood before the event (one may be replaced already)
        self.ratings.add(child.id, parents=tuple(p for p in parents if p in elders), source=elders)
        self.optimizers.pop(old.id)
        self.optimizers[child.id] = self._new_optimizer(child.slot)
        self.lineage.append(dict(child.to_dict(), step=step))

    def evolve(
        self,
        bank: Bank,
        config,
        *,
        step: int,
        generator: torch.Generator,
        operators,
        fitness: dict[str, float] | None = None,
        selection_generator: torch.Generator | None = None,
        cases: dict[str, torch.Tensor] | None = None,
    ) -> list[Birth]:
        """One evolution (:func:`evolora.evolution.evolve`) with ``fitness`` ({id: value}, higher is
        better; default μ − 3σ) and ``cases`` ({id: (N,) per-case scores} or None, for lexicase); every
        child enters by :meth:`replace`. ``generator`` is the variation stream, ``selection_generator``
        the selection stream (None: ``generator``). Returns the births in order."""
        if fitness is None:
            fitness = {m.id: self.ratings.conservative(m.id) for m in self.population.members}
        self._elders = Ratings.from_state_dict(self.ratings.state_dict())
        try:
            return evolve(
                bank,
                self.population,
                fitness,
                config,
                step=step,
                generator=generator,
                operators=operators,
                enter=lambda old, child: self.replace(old, child, step),
                selection_generator=selection_generator,
                cases=cases,
            )
        finally:
            self._elders = None

    def cull(self, member: Individual, bank: Bank, mutation, *, step: int, generator: torch.Generator) -> dict:
        """Replace ``member`` (its factors are not finite) by a mutated copy of the best other member
        of its role (itself when alone), taken from its last finite factors (``bank.last_finite``).

        Args:
            mutation: (operator spec, params) of ``evolution.mutation``.
            step: the birth step recorded for the child.

        Returns:
            {"child": the newborn's id, "donor": the donor's id}.
        """
        peers = [m for m in self.population.role(member.role) if m is not member]
        donor = self.best(peers) if peers else member
        spec, params = mutation
        bank.set_factors(member.slot, spec.fn(bank.last_finite(donor.slot), generator=generator, **params))
        child = self.population.new_individual(
            member.role, member.slot, parents=(donor.id,), operator=spec.name, born_step=step
        )
        self.replace(member, child, step)
        return {"child": child.id, "donor": donor.id}

    def reset_optimizer(self, member: Individual) -> None:
        """Give ``member`` a fresh optimizer (after its factors were rolled back)."""
        self.optimizers[member.id] = self._new_optimizer(member.slot)

    # -- games and ratings -------------------------------------------------------------------
    def best(self, members: list[Individual]) -> Individual:
        """The member with the highest conservative rating μ − 3σ (the first one on a tie)."""
        return max(members, key=lambda m: self.ratings.conservative(m.id))

    def rate(
        self, pair_solve_rates: dict[tuple[str, str], float | None], sides: tuple[str, str] = ("teacher", "student")
    ) -> dict[str, str]:
        """Record each (proposer, solver) pair's match from the solver's solve rate; self-play and
        hall-of-fame games are not rated. Returns {"proposer|solver": winner}, the winner named
        by ``sides`` (proposer's, solver's) or "draw": for the review game, (student, critic) pairs
        with the critic's agreement rate and ``sides=("student", "critic")``."""
        names = {"teacher": sides[0], "student": sides[1], "draw": "draw"}  # Ratings.record_match's words
        return {
            f"{t}|{s}": names[self.ratings.record_match(s, t, rate)]
            for (t, s), rate in pair_solve_rates.items()
            if t != s and s in self.ratings
        }

    def add_tally(self, counts: dict[str, dict[str, int]]) -> None:
        """Add a play's counts ({member id: {count name: n}}, :attr:`evolora.plays.Played.tally`) to the
        tally of each member, new ids and names in the order given."""
        for member, mine in counts.items():
            tally = self.tally.setdefault(member, {})
            for name, n in mine.items():
                tally[name] = tally.get(name, 0) + n

    # -- hall of fame ------------------------------------------------------------------------
    def frozen(self, role: str) -> list[Individual]:
        """The hall-of-fame snapshots as frozen handles of ``role`` (empty when the hall is off)."""
        if self.hall is None:
            return []
        return [Individual(id=i, role=role, slot=self.hall_slots[i], operator="hall_of_fame") for i in self.hall.ids]

    def enshrine(self, bank: Bank, role: str, step: int) -> None:
        """Snapshot the best member of ``role`` (by μ − 3σ) into the hall, reusing the oldest slot when full."""
        if self.hall is None:
            return
        best = self.best(self.population.role(role))
        snapshot = f"{best.id}@{step}"
        slot = self.hall_slots[self.hall.ids[0]] if len(self.hall) == self.hall.capacity else f"H{len(self.hall)}"
        evicted = self.hall.add(snapshot)
        if evicted is not None:
            self.hall_slots.pop(evicted)
        self.hall_slots[snapshot] = slot
        bank.set_factors(slot, bank.get_factors(best.slot))

    # -- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """JSON-serialisable state (optimizers apart): population, ratings, hall, hall_slots, lineage, tally."""
        return {
            "population": self.population.state_dict(),
            "ratings": self.ratings.state_dict(),
            "hall": self.hall.state_dict() if self.hall else None,
            "hall_slots": dict(self.hall_slots),
            "lineage": self.lineage,
            "tally": self.tally,
        }

    def load_state_dict(self, state: dict, optimizer_states: dict[str, dict]) -> None:
        """Restore :meth:`state_dict` output (a run checkpoint's state) and each member's optimizer state."""
        self.population = Population.from_state_dict(state["population"])
        self.ratings = Ratings.from_state_dict(state["ratings"])
        self.lineage = state["lineage"]
        self.tally = state["tally"]
        if self.hall is not None and state.get("hall"):
            self.hall.load_state_dict(state["hall"])
            self.hall_slots = dict(state["hall_slots"])
        self.optimizers = {}
        for member in self.population.members:
            self.optimizers[member.id] = self._new_optimizer(member.slot)
            self.optimizers[member.id].load_state_dict(optimizer_states[member.id])
