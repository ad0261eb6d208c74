"""Skill ratings for teachers and students: TrueSkill-style (mu, sigma) plus a plain Elo.

Every individual (a LoRA adapter, keyed by its string id) carries an openskill
``ThurstoneMostellerFull`` rating (the Gaussian TrueSkill-like model) and an Elo
number for readers who expect one. The ranking key used by evolution is the
conservative rating ``mu - 3 * sigma``.

A match is one teacher against one student. Its result is decided by comparing the
student's observed solve rate with the solve rate the ratings predicted
(paper §2 step 6)::

    p = P(student beats teacher) = Phi((mu_s - mu_t) / sqrt(2 beta^2 + sigma_s^2 + sigma_t^2))
    solve_rate > p  -> student wins
    solve_rate < p  -> teacher wins
    solve_rate == p -> draw            (within DRAW_TOLERANCE)
    no valid problem (solve_rate None) -> student wins

References:
    Castanyer et al., "PopuLoRA: Co-Evolving LLM Populations for Reasoning Self-Play",
    arXiv 2605.16727, §2 steps 1, 6 and 7. Herbrich et al., "TrueSkill", NeurIPS 2006.
    Weng & Lin, "A Bayesian Approximation Method for Online Ranking", JMLR 2011
    (the openskill models).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from openskill.models import ThurstoneMostellerFull

__all__ = ["DRAW_TOLERANCE", "Outcome", "RatingConfig", "Ratings"]

DRAW_TOLERANCE = 1e-9
"""|solve_rate - p| at or below this counts as a draw."""

Outcome = Literal["student", "teacher", "draw"]


@dataclass(frozen=True)
class RatingConfig:
    """Rating hyperparameters (TrueSkill defaults, paper §2 step 1)."""

    mu0: float = 25.0
    """Initial mean skill of every newcomer (founders and children alike)."""
    sigma0: float = 25.0 / 3.0
    """Initial skill uncertainty, > 0."""
    beta: float = 25.0 / 6.0
    """Performance noise per player, > 0; sets the scale of win probabilities."""
    tau: float = 25.0 / 300.0
    """Dynamics: added (in quadrature) to sigma before each update, >= 0. Keeps sigma
    from collapsing so ratings can follow players whose skill changes by training."""
    elo0: float = 1000.0
    """Initial Elo."""
    elo_k: float = 32.0
    """Elo K-factor, > 0: the most Elo one match can move."""

    def __post_init__(self) -> None:
        for name in ("sigma0", "beta", "elo_k"):
            if not getattr(self, name) > 0:
                raise ValueError(f"RatingConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if not self.tau >= 0:
            raise ValueError(f"RatingConfig.tau must be >= 0, got {self.tau!r}")
        for name in ("mu0", "elo0"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"RatingConfig.{name} must be finite, got {getattr(self, name)!r}")


def _normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _elo_expected(elo_a: float, elo_b: float) -> float:
    """Logistic expected score of a against b on the 400-point scale."""
    return 1.0 / (1.0 + 10.0 ** ((elo_b - elo_a) / 400.0))


@dataclass
class _Record:
    """Mutable per-individual state kept beside the openskill rating object."""

    elo: float
    matches: int = 0
    wins: int = 0
    losses: int = 0
    draws: int = 0


class Ratings:
    """Ratings of a population, keyed by individual id.

    Args:
        config: hyperparameters; defaults are the TrueSkill ones.

    Example:
        >>> r = Ratings()
        >>> r.add("t0"); r.add("s0")
        >>> r.win_probability("s0", "t0")
        0.5
        >>> r.record_match("s0", "t0", solve_rate=0.75)
        'student'
        >>> r.mu("s0") > 25.0 > r.mu("t0")
        True
    """

    def __init__(self, config: RatingConfig | None = None) -> None:
        self.config = config if config is not None else RatingConfig()
        self._model = ThurstoneMostellerFull(
            mu=self.config.mu0, sigma=self.config.sigma0, beta=self.config.beta, tau=self.config.tau
        )
        self._skill: dict[str, Any] = {}  # id -> openskill rating (has .mu, .sigma)
        self._records: dict[str, _Record] = {}

    # ----------------------------------------------------------------- membership
    def add(self, member_id: str, *, parents: tuple[str, ...] = (), source: Ratings | None = None) -> None:
        """Rate a newcomer: fresh (mu0, sigma0, elo0), or inherited from rated ``parents``.

        Args:
            member_id: the newcomer's id.
            parents: ids of rated members (a child's parents): the newcomer starts at their mean μ,
                mean σ capped at ``sigma0``, and mean Elo, so μ − 3σ does not rank it low for being new.
                Empty: a fresh rating (founders, and the paper's children).
            source: the ratings the parents are read from (default: these), e.g. a copy taken
                before an evolution event that replaced a parent.

        Raises:
            ValueError: the id is already rated (remove it first to reset it).
            TypeError: the id is not a str. KeyError: a parent is not rated.
        """
        if not isinstance(member_id, str):
            raise TypeError(f"ids are str, got {type(member_id).__name__}: {member_id!r}")
        if member_id in self._skill:
            raise ValueError(f"{member_id!r} is already rated; call remove({member_id!r}) first to reset it")
        source = self if source is None else source
        for parent in parents:
            source._check(parent)
        if parents:
            mu = sum(source.mu(p) for p in parents) / len(parents)
            sigma = min(self.config.sigma0, sum(source.sigma(p) for p in parents) / len(parents))
            self._skill[member_id] = self._model.rating(mu=mu, sigma=sigma, name=member_id)
            self._records[member_id] = _Record(elo=sum(source.elo(p) for p in parents) / len(parents))
            return
        self._skill[member_id] = self._model.rating(name=member_id)
        self._records[member_id] = _Record(elo=self.config.elo0)

    def remove(self, member_id: str) -> None:
        """Forget ``member_id`` (e.g. an individual replaced by evolution). Raises KeyError if unknown."""
        self._check(member_id)
        del self._skill[member_id]
        del self._records[member_id]

    def __contains__(self, member_id: object) -> bool:
        return member_id in self._skill

    def __len__(self) -> int:
        return len(self._skill)

    @property
    def ids(self) -> list[str]:
        """Rated ids in insertion order."""
        return list(self._skill)

    def _check(self, member_id: str) -> None:
        if member_id not in self._skill:
            raise KeyError(f"{member_id!r} is not rated; known ids: {sorted(self._skill)}; call add() first")

    # ----------------------------------------------------------------- queries
    def mu(self, member_id: str) -> float:
        """Mean skill."""
        self._check(member_id)
        return float(self._skill[member_id].mu)

    def sigma(self, member_id: str) -> float:
        """Skill uncertainty (> 0)."""
        self._check(member_id)
        return float(self._skill[member_id].sigma)

    def conservative(self, member_id: str) -> float:
        """Conservative rating mu - 3 sigma: the ranking key for evolution (paper §2 step 7)."""
        return self.mu(member_id) - 3.0 * self.sigma(member_id)

    def elo(self, member_id: str) -> float:
        """Plain Elo (shown beside mu/sigma; never used for decisions)."""
        self._check(member_id)
        return self._records[member_id].elo

    def ranked(self, member_ids: list[str] | None = None) -> list[str]:
        """Ids sorted best first by conservative rating (ties keep the given order).

        Args:
            member_ids: the ids to rank (e.g. one sub-population); all rated ids when None.
        """
        member_ids = self.ids if member_ids is None else list(member_ids)
        return sorted(member_ids, key=self.conservative, reverse=True)

    def win_probability(self, student_id: str, teacher_id: str) -> float:
        """P(student beats teacher), in (0, 1).

        p = Phi((mu_s - mu_t) / sqrt(2 beta^2 + sigma_s^2 + sigma_t^2)), Phi the standard
        normal CDF. Equal ratings give exactly 0.5.

        Source: paper §2 step 1 (arXiv 2605.16727); TrueSkill's match-outcome probability.
        """
        mu_s, sigma_s = self.mu(student_id), self.sigma(student_id)
        mu_t, sigma_t = self.mu(teacher_id), self.sigma(teacher_id)
        scale = math.sqrt(2.0 * self.config.beta**2 + sigma_s**2 + sigma_t**2)
        return _normal_cdf((mu_s - mu_t) / scale)

    # ----------------------------------------------------------------- updates
    def record_match(self, student_id: str, teacher_id: str, solve_rate: float | None) -> Outcome:
        """Decide one teacher-student match and update both players' ratings.

        The expected p = ``win_probability(student_id, teacher_id)`` is taken before the
        update. The student wins when ``solve_rate > p``, the teacher when ``solve_rate < p``,
        and it is a draw when they agree within ``DRAW_TOLERANCE``. A match in which the
        teacher produced no valid problem (``solve_rate=None``) is a student win. Then one
        1-vs-1 openskill update (ranks, draws as tied ranks) and one Elo update
        (K = ``config.elo_k``, score 1 / 0.5 / 0; the two Elo changes sum to zero).

        Args:
            student_id: the solver; must differ from ``teacher_id``.
            teacher_id: the proposer.
            solve_rate: the student's mean success over the match's valid problems, in
                [0, 1]; None when the teacher proposed no valid problem.

        Returns:
            "student", "teacher" or "draw": who won.

        Raises:
            KeyError: an id is not rated.
            ValueError: the ids are equal, or solve_rate is outside [0, 1] / not finite.

        Source: paper §2 step 6 (arXiv 2605.16727).
        """
        if student_id == teacher_id:
            raise ValueError(f"a match needs two players, got {student_id!r} against itself")
        expected = self.win_probability(student_id, teacher_id)  # also checks both ids
        if solve_rate is None:
            outcome: Outcome = "student"
        else:
            solve_rate = float(solve_rate)
            if not 0.0 <= solve_rate <= 1.0:  # also rejects NaN
                raise ValueError(f"solve_rate must be in [0, 1] or None (no valid problem), got {solve_rate!r}")
            if abs(solve_rate - expected) <= DRAW_TOLERANCE:
                outcome = "draw"
            elif solve_rate > expected:
                outcome = "student"
            else:
                outcome = "teacher"
        self._update(student_id, teacher_id, outcome)
        return outcome

    def _update(self, student_id: str, teacher_id: str, outcome: Outcome) -> None:
        # openskill: lower rank is better; equal ranks are a draw.
        ranks = {"student": [0, 1], "teacher": [1, 0], "draw": [0, 0]}[outcome]
        [[new_student], [new_teacher]] = self._model.rate(
            [[self._skill[student_id]], [self._skill[teacher_id]]], ranks=ranks
        )
        self._skill[student_id], self._skill[teacher_id] = new_student, new_teacher

        student, teacher = self._records[student_id], self._records[teacher_id]
        score = {"student": 1.0, "teacher": 0.0, "draw": 0.5}[outcome]
        delta = self.config.elo_k * (score - _elo_expected(student.elo, teacher.elo))
        student.elo += delta
        teacher.elo -= delta

        for record, won, lost in (
            (student, outcome == "student", outcome == "teacher"),
            (teacher, outcome == "teacher", outcome == "student"),
        ):
            record.matches += 1
            record.wins += won
            record.losses += lost
            record.draws += outcome == "draw"

    # ----------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable state: ``{"config": {...}, "players": {id: {...}}}``.

        Floats are stored as Python floats, so ``json.dumps`` / ``json.loads`` and
        ``load_state_dict`` reproduce every number bit for bit; insertion order is kept.
        """
        players = {}
        for member_id, skill in self._skill.items():
            record = self._records[member_id]
            players[member_id] = {
                "mu": float(skill.mu),
                "sigma": float(skill.sigma),
                "elo": float(record.elo),
                "matches": record.matches,
                "wins": record.wins,
                "losses": record.losses,
                "draws": record.draws,
            }
        return {"config": asdict(self.config), "players": players}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace all players with those in ``state`` (from ``state_dict``).

        Raises:
            ValueError: the state's config differs from ``self.config`` (build the
                object with ``Ratings.from_state_dict`` instead), or a field is missing.
        """
        config = RatingConfig(**state["config"])
        if config != self.config:
            raise ValueError(
                f"checkpoint ratings were made with {config}, this object has {self.config}; "
                "use Ratings.from_state_dict(state) to restore with the saved config"
            )
        skill, records = {}, {}
        for member_id, player in state["players"].items():
            try:
                skill[member_id] = self._model.rating(
                    mu=float(player["mu"]), sigma=float(player["sigma"]), name=member_id
                )
                records[member_id] = _Record(
                    elo=float(player["elo"]),
                    matches=int(player["matches"]),
                    wins=int(player["wins"]),
                    losses=int(player["losses"]),
                    draws=int(player["draws"]),
                )
            except KeyError as err:
                raise ValueError(f"ratings state for {member_id!r} lacks field {err}") from None
        self._skill, self._records = skill, records

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Ratings:
        """Build a ``Ratings`` with the saved config and players."""
        ratings = cls(RatingConfig(**state["config"]))
        ratings.load_state_dict(state)
        return ratings

    def table(self, member_ids: list[str] | None = None) -> list[dict[str, Any]]:
        """Rows for display, best conservative rating first.

        Each row: rank (1-based), id, mu, sigma, conservative, elo, matches, wins,
        losses, draws.
        """
        rows = []
        for rank, member_id in enumerate(self.ranked(member_ids), start=1):
            record = self._records[member_id]
            rows.append(
                {
                    "rank": rank,
                    "id": member_id,
                    "mu": self.mu(member_id),
                    "sigma": self.sigma(member_id),
                    "conservative": self.conservative(member_id),
                    "elo": record.elo,
                    "matches": record.matches,
                    "wins": record.wins,
                    "losses": record.losses,
                    "draws": record.draws,
                }
            )
        return rows
