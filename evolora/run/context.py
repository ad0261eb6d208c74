"""The bookkeeping of one step, kept out of the step's pseudocode: timing per phase, faults, the
samples and games of every play, and the step record they make.

    step = StepContext.begin(run)           # the step's number and random streams
    step.add(game, played)                  # a play's samples, games, seconds and rollouts
    step.phase("selfplay")                  # a phase starts: the run's phase hooks (evolora.run.Run.phase)
    with step.timed("train"): ...           # a phase's start, and its wall seconds
    record = step.record(sections, extra, curve, timing)   # the metrics.jsonl line

The record is the arm's game's section (counts, rates, rewards, losses, ratings, births, timing:
:func:`evolora.step_record.step_record`), the evolution event's keys, the learning-curve point,
the faults, then each further play's section (``critic``), in that order.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator

from evolora.generation.types import RolloutStats
from evolora.streams import StepStreams, step_streams

if TYPE_CHECKING:
    from evolora.game import Game
    from evolora.plays import Played


@dataclass
class StepContext:
    """One step in progress (:func:`evolora.run.step.run_step`).

    Attributes:
        number: the step (1-based). streams: its random streams (:mod:`evolora.streams`).
        roles: {member id: role} of the members who play it, once repaired (evolution may replace them later).
        began: ``time.perf_counter()`` at its start.
        seconds: wall seconds per phase, in order (plays' phases, ``train``, ``evolve``, ``total``).
        faults: the repairs and dropped updates of the step (the record's ``faults``).
        samples: {member id: samples} of every play so far, the update's input (plays in order).
        rollout: tokens and seconds of every play's rollouts.
        played: (game, :class:`evolora.plays.Played`) of every play so far, in order.
        updates: {member id: its update result} once trained; births: the evolution's, once evolved.
        on_phase: called with a phase's name at its start (the run's :meth:`evolora.run.Run.phase`).
    """

    number: int
    streams: StepStreams
    roles: dict[str, str] = field(default_factory=dict)
    began: float = field(default_factory=time.perf_counter)
    seconds: dict[str, float] = field(default_factory=dict)
    faults: list[dict] = field(default_factory=list)
    samples: dict[str, list] = field(default_factory=dict)
    rollout: RolloutStats = field(default_factory=RolloutStats)
    played: list[tuple[Game, Played]] = field(default_factory=list)
    updates: dict = field(default_factory=dict)
    births: list = field(default_factory=list)
    on_phase: Callable[[str], None] = field(default=lambda name: None, repr=False)

    @classmethod
    def begin(cls, run) -> StepContext:
        """The next step of ``run``: its number and streams (the bank seeded from them)."""
        number = run.step + 1
        streams = step_streams(run.config.run.seed, number)  # one generator per purpose (evolora.streams)
        run.bank.seed(streams.rollout_seed)
        return cls(number, streams, on_phase=run.phase)

    def phase(self, name: str) -> None:
        """A phase of the step starts (between ops): tell :attr:`on_phase`."""
        self.on_phase(name)

    @contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        """Start ``phase`` (:meth:`phase`), then add the wall seconds of the block to ``seconds[phase]``."""
        self.phase(phase)
        began = time.perf_counter()
        yield
        self.seconds[phase] = time.perf_counter() - began

    @property
    def games(self) -> list:
        """The records of every play so far, in play order (the step's ``matches.jsonl`` lines)."""
        return [game for _, played in self.played for game in played.games]

    def add(self, game: Game, played: Played) -> None:
        """Take a play's results in: its samples, games, phase seconds and rollout statistics."""
        self.played.append((game, played))
        self.samples.update(played.samples)
        self.seconds.update(played.seconds)
        if played.rollout is not None:
            self.rollout.tokens += played.rollout.tokens
            self.rollout.seconds += played.rollout.seconds

    def rate(self, league) -> list[dict[str, str]]:
        """Tally and rate each play's matches in play order (``league.rate`` with the game's sides);
        each play's {"proposer|solver": winner}."""
        outcomes = []
        for game, played in self.played:
            league.add_tally(played.tally)
            outcomes.append(league.rate(played.rates, sides=(game.proposer, game.solver)))
        return outcomes

    def stop(self) -> None:
        """Record the step's wall seconds so far as ``seconds["total"]``."""
        self.seconds["total"] = time.perf_counter() - self.began

    def sections(self, outcomes: list[dict[str, str]]) -> list[dict]:
        """Each play's section of the record, given its rated matches (``outcomes``, in play order)."""
        return [played.section(self, rated) for (_, played), rated in zip(self.played, outcomes)]

    def record(self, sections: list[dict], extra: dict, curve: dict | None, timing: dict | None = None) -> dict:
        """The step record: the first play's section, ``extra`` (the evolution event's keys), the
        learning-curve point (``held_out_curve``, when taken), ``faults``, then the other plays'
        sections; with ``timing`` (the bank's per worker and phase on Ray, None in process) its
        ``workers`` and ``seconds["driver_overhead"]``."""
        record = {**sections[0], **extra}
        if curve is not None:
            record["held_out_curve"] = curve
        record["faults"] = self.faults
        for section in sections[1:]:
            record.update(section)
        if timing is not None:
            record["workers"], self.seconds["driver_overhead"] = timing["workers"], timing["driver_overhead"]
        return record
