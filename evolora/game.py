"""Roles as data: the game a step plays (who proposes, who solves) and the arms that set one up.

    Game(proposer="teacher", solver="student")                  # PopuLoRA: teachers propose, students solve
    Game(proposer="agent", solver="agent")                      # AZR baseline: one role plays both sides
    Game(proposer="student", solver="critic", play="review")    # critics judge the students' answers

A step is a small pipeline of games (:attr:`Arm.pipeline`): the arm's game, then, when the run
has critics, its review game, where each critic sees a problem and one student answer and
returns a verdict (``correct``/``incorrect``) that the verifier's grade scores, then the games
the config adds (``selfplay.plays``). Each game names its play, the function that plays it
(:mod:`evolora.plays`), so a new role needs a play function and config, not a change of the loop.

A population is a mapping role → members; the loop asks the game which role sits on which
side, so selection, ratings, the hall of fame and evolution never name a role. Records keep
the side names of today's game (``teacher``/``student`` in ``matches.jsonl`` and the step
record) for every arm. Nothing here imports the rest of the package.

Source: PopuLoRA (arXiv 2605.16727) §2 (teacher and student populations); Absolute Zero
Reasoner (arXiv 2505.03335), the single-agent baseline of PopuLoRA §4; Self-Play Critic (SPC,
arXiv 2504.19162), the critic that judges a solver's answers.
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
    play: str = "selfplay"
    """The play that plays it, a name of :data:`evolora.plays.PLAYS` (``selfplay``: propose and solve;
    ``review``: judge the answers of the game before it), or a user's ``module:function``."""

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
        review: the game played on the solvers' answers after ``game`` (``student`` → ``critic``),
            when the run has members of its solver role; None when the arm has no review.
        plays: further games of each step, after the review (``selfplay.plays`` of the config).
    """

    game: Game
    sizes: Mapping[str, int] | None = None
    evolve: bool = True
    review: Game | None = None
    plays: tuple[Game, ...] = ()

    @property
    def pipeline(self) -> tuple[Game, ...]:
        """The games a step may play, in order: ``game``, ``review`` when the arm has one, then
        ``plays``. A step plays those whose roles all have members."""
        return (self.game, *((self.review,) if self.review is not None else ()), *self.plays)

    @property
    def roles(self) -> tuple[str, ...]:
        """Every role of the pipeline, in order of appearance (``teacher, student, critic``)."""
        return tuple(dict.fromkeys(role for game in self.pipeline for role in game.roles))


ARMS: Mapping[str, Arm] = MappingProxyType(
    {
        "population": Arm(
            Game(proposer="teacher", solver="student"), review=Game(proposer="student", solver="critic", play="review")
        ),
        "single_agent": Arm(Game(proposer="agent", solver="agent"), sizes=MappingProxyType({"agent": 1}), evolve=False),
    }
)
"""The arm of each ``selfplay.mode``: co-evolving teachers and students (PopuLoRA), or one agent that
proposes and solves its own problems without evolution (the AZR baseline, PopuLoRA §4); the
population arm's critics, when the run has any, review the students' answers."""

POPULATION_ROLES: tuple[str, ...] = ARMS["population"].roles
"""The roles ``population.roles`` may declare sizes for: ``teacher``, ``student``, ``critic``."""

REQUIRED_ROLES: tuple[str, ...] = ARMS["population"].game.roles
"""The roles every population run has (the main game's): ``teacher`` and ``student``; ``critic`` is optional."""

MEMBER_ROLES: tuple[str, ...] = tuple(dict.fromkeys(arm.game.solver for arm in ARMS.values()))
"""The roles whose held-out accuracy is a member's (each arm's solver): ``student`` and ``agent``;
what evaluation, export and the reports rank members by."""
