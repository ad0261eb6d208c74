"""``selfplay.plays``: further games of every step, each played by a play function, and the checks
that tie them to the roles of ``population.roles``.

    population: {roles: {teacher: 2, student: 2, judge: 2}}
    selfplay:
      plays:
        - {play: my_pkg.plays:judge, proposer: student, solver: judge}

Each entry adds a :class:`evolora.game.Game` after the arm's own games (:attr:`evolora.game.Arm.plays`);
its ``play`` is a name of :data:`evolora.plays.PLAYS` or a ``module:function`` (imported when the
config loads). A role of ``population.roles`` that is not the game's must be played by an entry,
and every role an entry names must have members.
"""

from __future__ import annotations

from pydantic import field_validator

from evolora.config.types import _Section
from evolora.game import Game
from evolora.plays import play_spec


class PlayConfig(_Section):
    """One further game of each step: who sits on which side and the play that plays it."""

    play: str
    """A registered play (:data:`evolora.plays.PLAYS`: ``selfplay``, ``review``) or your own
    ``package.module:function`` (:mod:`evolora.plays`)."""
    proposer: str
    """The role on the proposer side (its members pick or make the inputs; first in rated pairs)."""
    solver: str
    """The role on the solver side (scored on the inputs; second in rated pairs)."""

    @field_validator("play")
    @classmethod
    def _known_play(cls, value: str) -> str:
        play_spec(value)  # an unknown name, or a function that does not import, is refused here
        return value

    @property
    def game(self) -> Game:
        """The :class:`evolora.game.Game` this entry adds to the step's pipeline."""
        return Game(proposer=self.proposer, solver=self.solver, play=self.play)


def check_plays(role_sizes: dict[str, int], plays: tuple[PlayConfig, ...], arm_roles: tuple[str, ...]) -> None:
    """Refuse a role nobody plays or a play of a role without members, before anything loads.

    Args:
        role_sizes: {role: members} of the run; plays: ``selfplay.plays``; arm_roles: the roles of
            the arm's own games (``teacher``, ``student``, ``critic``).

    Raises:
        ValueError: a role of ``population.roles`` that no game plays, or an entry of
            ``selfplay.plays`` naming a role without members.
    """
    for index, entry in enumerate(plays):
        for side in ("proposer", "solver"):
            role = getattr(entry, side)
            if role not in role_sizes:
                raise ValueError(
                    f"selfplay.plays[{index}].{side}: role {role!r} has no members; "
                    f"give it a size in population.roles (such as {{{role}: 2}})"
                )
    played = set(arm_roles) | {role for entry in plays for role in (entry.proposer, entry.solver)}
    for role in role_sizes:
        if role not in played:
            raise ValueError(
                f"population.roles.{role}: no game of the step plays it; add one to selfplay.plays, "
                f"such as {{play: my_pkg.plays:my_play, proposer: student, solver: {role}}}"
            )
