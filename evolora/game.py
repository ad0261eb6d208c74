"""Roles as data: the game a step plays (who proposes, who solves) and the arms that set one up.

    Game(proposer="teacher", solver="student")   # PopuLoRA: teachers propose, students solve
    Game(proposer="agent", solver="agent")       # AZR baseline: one role plays both sides

A population is a mapping role → members; the loop asks the game which role sits on which
side, so selection, ratings, the hall of fame and evolution never name a role. Records keep
the side names of today's game (``teacher``/``student`` in ``matches.jsonl`` and the step
record) for every arm. Nothing here imports the rest of the package.

Source: PopuLoRA (arXiv 2605.16727) §2 (teacher and student populations); Absolute Zero
Reasoner (arXiv 2505.03335), the single-agent baseline of PopuLoRA §4.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping


@dataclass(frozen=True)
class Game:
    """Who plays whom: members of ``proposer`` propose problems, members of ``solver`` solve them.

    The solver's solve rate is the proposer's learnability reward and decides their match
    (PopuLoRA arXiv 2605.16727 §2 steps 1-5). When one role plays both sides, an individual
    solves its own problems and such self-play games are not rated.
    """

    proposer: str
    solver: str

    @property
    def roles(self) -> tuple[str, ...]:
        """The distinct roles of the game, proposer first (``("agent",)`` for self-play)."""
        return tuple(dict.fromkeys((self.proposer, self.solver)))


@dataclass(frozen=True)
class Arm:
    """What a ``selfplay.mode`` sets up: the game of every step, the role sizes, and evolution.

    Attributes:
        game: the game played each step.
        sizes: fixed {role: members}, or None when the ``population`` section declares them.
        evolve: whether the outer loop replaces members (``evolution`` section) every k steps.
    """

    game: Game
    sizes: Mapping[str, int] | None = None
    evolve: bool = True


ARMS: Mapping[str, Arm] = MappingProxyType({
    "population": Arm(Game(proposer="teacher", solver="student")),
    "single_agent": Arm(Game(proposer="agent", solver="agent"), sizes=MappingProxyType({"agent": 1}), evolve=False),
})
"""The arm of each ``selfplay.mode``: co-evolving teachers and students (PopuLoRA), or one agent that
proposes and solves its own problems without evolution (the AZR baseline, PopuLoRA §4)."""

POPULATION_ROLES: tuple[str, ...] = ARMS["population"].game.roles
"""The roles ``population.roles`` declares sizes for (the roles of the ``population`` arm's game)."""
