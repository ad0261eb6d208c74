"""The plays: one function per kind of game a step plays, looked up by name as operators and engines are.

    played = PLAYS["selfplay"].load()(run, step, game)    # teachers propose, students solve
    played = PLAYS["review"].load()(run, step, game)      # critics judge the students' answers

A step (:func:`evolora.run.step.run_step`) plays the arm's pipeline of games in order
(:attr:`evolora.game.Arm.pipeline`); each :class:`evolora.game.Game` names its play. A play is
called as ``fn(run, step, game)`` with the :class:`evolora.run.Run` (bank, tokenizer, task,
population, ratings, config: read only, apart from state of its own such as the problem memory),
the step's :class:`evolora.run.context.StepContext` (its number, random streams, the samples
and games of the plays before it) and its game (which roles sit on which side), and returns a
:class:`Played`. The step then trains every member on the samples of all plays at once, tallies
and rates each play's matches (``league.rate(played.rates, sides=(game.proposer, game.solver))``)
and writes each play's section into the step record.

The plays that ship (``selfplay``, ``review``) are registered by their ``module:function`` path and
imported on first use; a user's own is registered with :func:`register_play`, or named in YAML
as ``selfplay.plays: [{play: my_pkg.plays:my_play, proposer: student, solver: judge}]`` (imported
when the config loads). Nothing here imports the rest of the package, so a config is checked
with it before anything loads.

Source: PopuLoRA (arXiv 2605.16727) §2 (one game per step, PFSP matches, ratings); SPC
(arXiv 2504.19162) for the review.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evolora.registry import Registry, load_target, summary
from evolora.user_code import UserCode, is_users

KEY = "selfplay.plays"
"""The config key that names a play of the user's own."""

CONTRACT = "fn(run, step, game) returns an evolora.plays.Played; evaluate(run, game) returns a dict"
"""What a user's play (and its end-of-run evaluation) takes and returns."""


@dataclass
class Played:
    """What one play of a step returns.

    Attributes:
        samples: {member id: its new samples for this step's update} (:class:`evolora.learner.Sample`),
            an entry (maybe empty) for every member of the game's roles that trains on this play.
        games: the records this play adds to ``matches.jsonl`` (each with a ``to_dict()``); [] when
            it adds none (the review writes its verdicts into the games it reviewed).
        rates: {(proposer id, solver id): the solver's score in [0, 1], or None when unplayed}: the
            input of the play's rated matches (``League.rate``); {} for an unrated play.
        tally: {member id: {count name: n}} to add to each member's games tally (``League.tally``).
        seconds: wall seconds per phase of the play (the step record's ``seconds``), in order.
        rollout: tokens and seconds of its rollouts (:class:`evolora.generation.types.RolloutStats`),
            or None.
        section: its section of the step record, built once the step is done, as
            ``section(step, outcomes)``: the step's :class:`evolora.run.context.StepContext` (updates,
            births and timing filled in) and {"proposer|solver": winner} of its rated matches.
    """

    samples: dict[str, list]
    games: list = field(default_factory=list)
    rates: dict[tuple[str, str], float | None] = field(default_factory=dict)
    tally: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    rollout: Any = None
    section: Callable[[Any, dict[str, str]], dict] = lambda step, outcomes: {}


@dataclass(frozen=True)
class PlaySpec:
    """One registered play: its ``name``, the ``target`` it is imported from (``module:function``), a
    one-line ``doc``, and ``evaluate``: the ``module:function`` of its end-of-run evaluation, called
    as ``fn(run, game)`` and returning the summary keys it adds ({} for none), or None."""

    name: str
    target: str
    doc: str = ""
    evaluate: str | None = None

    def load(self) -> Callable[..., Played]:
        """The play function (imported on first use); a user's own is guarded, so that an exception
        or a result other than a :class:`Played` raises :class:`~evolora.user_code.UserCodeError`
        naming ``selfplay.plays``, the play and :data:`CONTRACT`.

        Raises:
            ValueError: the module cannot be imported, lacks the attribute, or it is not callable.
        """
        found = load_target(self.target, f"play {self.name!r}")
        return UserCode(KEY, self.name, CONTRACT).guard(found, check=_check_played) if is_users(found) else found

    def load_evaluate(self) -> Callable[..., dict] | None:
        """The end-of-run evaluation function, or None when the play has none; a user's own is
        guarded as :meth:`load` guards the play (its errors name the method ``evaluate``)."""
        if self.evaluate is None:
            return None
        found = load_target(self.evaluate, f"play {self.name!r}")
        return UserCode(KEY, self.name, CONTRACT).guard(found, "evaluate", _check_summary) if is_users(found) else found


def _check_played(result, args: tuple, kwargs: dict) -> str | None:
    """What is wrong with a play's ``result``, or None."""
    return None if isinstance(result, Played) else f"returned a {type(result).__name__}, not a Played"


def _check_summary(result, args: tuple, kwargs: dict) -> str | None:
    """What is wrong with an end-of-run evaluation's ``result``, or None."""
    return None if isinstance(result, dict) else f"returned a {type(result).__name__}, not a dict"


def _user_play(target: str) -> PlaySpec:
    """The spec of a user's ``module:function`` (its function imported now)."""
    return PlaySpec(target, target, summary(load_target(target, f"play {target!r}")))


PLAYS: dict[str, PlaySpec] = {}
"""Registered plays by name (the shipped ones, then a user's)."""

_PLAYS = Registry("play", entries=PLAYS, origin=lambda spec: spec.target, build=_user_play)


def register_play(
    name: str, target: str | None = None, *, doc: str = "", evaluate: str | None = None
) -> Callable[[Callable], Callable]:
    """Register a play function under ``name``; as a decorator, ``@register_play("judge")`` on the
    function (``target`` from its module and name, ``doc`` from its docstring's first line).

    Raises:
        ValueError: ``name`` is empty, contains ``:`` or is already registered.
    """
    return _PLAYS.register_target(name, target, doc, lambda target, doc: PlaySpec(name, target, doc, evaluate))


register_play(
    "selfplay",
    "evolora.run.plays:play_game",
    doc="proposers propose, solvers solve (evolora.selfplay.play_step); PFSP pairs rated by solve rate",
)
register_play(
    "review",
    "evolora.run.plays:play_review",
    doc="critics judge the solvers' answers of the step (evolora.critic.review_step); rated by agreement",
    evaluate="evolora.run.plays:evaluate_review",
)


def play_spec(name: str) -> PlaySpec:
    """The spec of a registered ``name``, or of ``module:function`` (registered under that string on
    first use, its function imported then).

    Raises:
        ValueError: an unknown name (the message lists the registered ones) or a target that does
            not import.
    """
    return _PLAYS.get(name)
