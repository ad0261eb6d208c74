"""Matchmaking: prioritised fictitious self-play (PFSP) between teachers and students.

Each step every teacher is paired with a student. For teacher t and candidate student s
let p = P(s beats t) from the ratings (``Ratings.win_probability``); s is drawn with
probability proportional to f(p), where f is a weighting named in the config:

====================  ===============  ===================================================
name                  f(p)             effect
====================  ===============  ===================================================
``variance``          p (1 - p)        balanced matches (p near 0.5); the paper's choice
``hard``              (1 - p)^k        students unlikely to beat the teacher: hard for the
                                       student (AlphaStar's f_hard with the student as
                                       the learner); larger k is greedier
``uniform``           1                ignore ratings
====================  ===============  ===================================================

Pairing schemes (``SCHEMES``):

- ``per_teacher_without_replacement``: teachers pick in a random order (from ``rng``);
  each draws from the students not yet used this step. When there are more teachers
  than students, the pool refills once every student has been used, so each student is
  used ⌊T/S⌋ or ⌈T/S⌉ times. The paper's reconstruction (one student per teacher).
- ``per_teacher_with_replacement``: each teacher draws independently from all students.
- ``round_robin``: every teacher against every student (T·S pairs, teacher-major
  order); deterministic, ignores the weighting and ``rng``. Costs S times more
  rollouts; gives the full per-matchup solve-rate matrix the paper plots.
- ``fixed_pairs``: teacher i always meets student i (mod S), in population order;
  deterministic, no cross-play (the ``independent_pairs`` arm of a study).

If all weights a teacher sees are zero (e.g. ``variance`` when every p rounds to 0 or 1)
the draw falls back to uniform over the same candidates.

A small ``HallOfFame`` keeps ids of past champions (frozen snapshots) as extra
opponents, as in the AlphaStar league.

References:
    Castanyer et al., "PopuLoRA", arXiv 2605.16727, §2 step 1.
    Vinyals et al., "Grandmaster level in StarCraft II using multi-agent RL",
    Nature 575 (2019): PFSP weightings f_var and f_hard, league hall of fame.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal, Protocol, get_args

import numpy as np

__all__ = [
    "SCHEMES",
    "WEIGHTINGS",
    "HallOfFame",
    "Scheme",
    "get_weighting",
    "hard",
    "pfsp_pairs",
    "pfsp_probabilities",
    "register_weighting",
    "uniform",
    "variance",
]

Scheme = Literal["per_teacher_without_replacement", "per_teacher_with_replacement", "round_robin", "fixed_pairs"]
SCHEMES: tuple[str, ...] = get_args(Scheme)


class _WinProbability(Protocol):
    def win_probability(self, student_id: str, teacher_id: str) -> float: ...


# --------------------------------------------------------------------------- weightings
def variance(p: np.ndarray | float) -> np.ndarray:
    """f_var(p) = p (1 - p): peaks at p = 0.5 (value 0.25), zero at 0 and 1.

    Args:
        p: win probabilities in [0, 1], any shape.
    Returns:
        weights >= 0, same shape as p.
    Source: AlphaStar PFSP (Nature 2019); PopuLoRA §2 step 1 (arXiv 2605.16727).
    """
    p = np.asarray(p, dtype=np.float64)
    return p * (1.0 - p)


def hard(p: np.ndarray | float, k: float = 2.0) -> np.ndarray:
    """f_hard(p) = (1 - p)^k: favours opponents the learner (here the student) rarely beats.

    Args:
        p: win probabilities in [0, 1], any shape.
        k: sharpness >= 0; k = 0 is uniform, larger k concentrates on the hardest.
    Returns:
        weights >= 0, same shape as p.
    Raises:
        ValueError: k < 0.
    Source: AlphaStar PFSP (Nature 2019).
    """
    if not k >= 0:
        raise ValueError(f"hard weighting needs k >= 0, got {k!r}")
    p = np.asarray(p, dtype=np.float64)
    return (1.0 - p) ** k


def uniform(p: np.ndarray | float) -> np.ndarray:
    """f(p) = 1: ratings ignored. Returns ones with p's shape."""
    return np.ones_like(np.asarray(p, dtype=np.float64))


WEIGHTINGS: dict[str, Callable[..., np.ndarray]] = {"variance": variance, "hard": hard, "uniform": uniform}
"""YAML name -> weighting function f(p, **params)."""

_WEIGHTING_PARAMS: dict[str, tuple[str, ...]] = {"variance": (), "hard": ("k",), "uniform": ()}


def register_weighting(name: str, fn: Callable[..., np.ndarray], params: tuple[str, ...] = ()) -> None:
    """Add a weighting under ``name``; ``params`` names the keyword arguments it takes (subset of {"k"}).

    Raises:
        ValueError: the name is taken, or a parameter is not one ``pfsp_pairs`` can pass.
    """
    if name in WEIGHTINGS:
        raise ValueError(f"weighting {name!r} is already registered; pick another name")
    unknown = set(params) - {"k"}
    if unknown:
        raise ValueError(f"weighting parameters must be among ['k'], got {sorted(unknown)}")
    WEIGHTINGS[name] = fn
    _WEIGHTING_PARAMS[name] = tuple(params)


def get_weighting(name: str, *, k: float = 2.0) -> Callable[[np.ndarray], np.ndarray]:
    """The weighting ``name`` with its parameters bound: a function p -> weights.

    Raises:
        ValueError: unknown name (the message lists the allowed ones), or bad k.
    """
    if name not in WEIGHTINGS:
        raise ValueError(f"unknown PFSP weighting {name!r}; allowed: {sorted(WEIGHTINGS)}")
    if not k >= 0:
        raise ValueError(f"PFSP weighting parameter k must be >= 0, got {k!r}")
    bound = {"k": k}
    return partial(WEIGHTINGS[name], **{param: bound[param] for param in _WEIGHTING_PARAMS[name]})


def _normalise(weights: np.ndarray) -> np.ndarray:
    """Weights -> probabilities; all-zero (or non-finite total) falls back to uniform."""
    weights = np.clip(np.asarray(weights, dtype=np.float64), 0.0, None)
    total = weights.sum()
    if not (np.isfinite(total) and total > 0):
        return np.full(weights.shape, 1.0 / weights.size)
    return weights / total


# --------------------------------------------------------------------------- PFSP
def _check_ids(kind: str, ids: Sequence[str]) -> list[str]:
    ids = list(ids)
    if len(set(ids)) != len(ids):
        raise ValueError(f"{kind} ids must be distinct, got {ids}")
    return ids


def pfsp_probabilities(
    teacher_id: str,
    student_ids: Sequence[str],
    ratings: _WinProbability,
    *,
    weighting: str = "variance",
    k: float = 2.0,
) -> np.ndarray:
    """The PFSP distribution over ``student_ids`` for one teacher.

    Args:
        teacher_id: the teacher choosing an opponent.
        student_ids: candidate students (non-empty, distinct).
        ratings: anything with ``win_probability(student_id, teacher_id)``, e.g. ``Ratings``.
        weighting: a name in ``WEIGHTINGS``.
        k: exponent for ``hard`` (>= 0); ignored by the others.

    Returns:
        float64 array, shape (len(student_ids),), >= 0, summing to 1; uniform when all
        weights are zero.

    Raises:
        ValueError: unknown weighting (lists the allowed ones), bad k, empty or repeated ids.

    Source: PopuLoRA §2 step 1 (arXiv 2605.16727).
    """
    student_ids = _check_ids("student", student_ids)
    if not student_ids:
        raise ValueError(f"teacher {teacher_id!r} has no students to choose from")
    fn = get_weighting(weighting, k=k)
    p = np.array([ratings.win_probability(s, teacher_id) for s in student_ids], dtype=np.float64)
    return _normalise(fn(p))


def pfsp_pairs(
    teacher_ids: Sequence[str],
    student_ids: Sequence[str],
    ratings: _WinProbability,
    *,
    weighting: str = "variance",
    k: float = 2.0,
    scheme: Scheme = "per_teacher_without_replacement",
    rng: np.random.Generator,
) -> list[tuple[str, str]]:
    """Pair teachers with students for one training step.

    Args:
        teacher_ids: teachers (distinct); may be empty.
        student_ids: students (distinct); non-empty when there are teachers.
        ratings: anything with ``win_probability(student_id, teacher_id)``.
        weighting: a name in ``WEIGHTINGS`` ("variance", "hard", "uniform").
        k: exponent for ``hard`` (>= 0).
        scheme: one of ``SCHEMES`` (see the module docstring).
        rng: the only source of randomness (unused by ``round_robin`` and ``fixed_pairs``).

    Returns:
        (teacher_id, student_id) pairs. Per-teacher schemes: one pair per teacher, in
        ``teacher_ids`` order. ``round_robin``: all T·S pairs, teacher-major.

    Raises:
        ValueError: unknown scheme or weighting (lists the allowed ones), bad k,
            repeated ids, or teachers without students.
        TypeError: rng is not a ``numpy.random.Generator``.

    Source: PopuLoRA §2 step 1 (arXiv 2605.16727); AlphaStar PFSP (Nature 2019).
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown pairing scheme {scheme!r}; allowed: {list(SCHEMES)}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), got {type(rng).__name__}")
    fn = get_weighting(weighting, k=k)  # validate names even when unused
    teacher_ids = _check_ids("teacher", teacher_ids)
    student_ids = _check_ids("student", student_ids)
    if not teacher_ids:
        return []
    if not student_ids:
        raise ValueError(f"{len(teacher_ids)} teachers but no students to pair them with")

    if scheme == "round_robin":
        return [(t, s) for t in teacher_ids for s in student_ids]
    if scheme == "fixed_pairs":
        return [(t, student_ids[i % len(student_ids)]) for i, t in enumerate(teacher_ids)]

    # weights[i, j] = f(P(student j beats teacher i)), shape (T, S)
    p = np.array([[ratings.win_probability(s, t) for s in student_ids] for t in teacher_ids], dtype=np.float64)
    weights = fn(p)

    if scheme == "per_teacher_with_replacement":
        return [
            (t, student_ids[rng.choice(len(student_ids), p=_normalise(weights[i]))]) for i, t in enumerate(teacher_ids)
        ]

    # per_teacher_without_replacement
    chosen: dict[int, int] = {}
    available = np.ones(len(student_ids), dtype=bool)
    for i in rng.permutation(len(teacher_ids)):
        if not available.any():
            available[:] = True  # every student used once: start another round
        candidates = np.flatnonzero(available)
        j = int(candidates[rng.choice(len(candidates), p=_normalise(weights[i, candidates]))])
        chosen[int(i)] = j
        available[j] = False
    return [(t, student_ids[chosen[i]]) for i, t in enumerate(teacher_ids)]


# --------------------------------------------------------------------------- hall of fame
class HallOfFame:
    """The ids of up to ``capacity`` past champions (frozen snapshots), oldest first.

    Adding to a full hall drops the oldest entry; re-adding an id moves it to newest.
    The loop decides what a champion is and stores the snapshot's weights elsewhere.

    Args:
        capacity: maximum number of entries, >= 1.

    Raises:
        ValueError: capacity < 1.

    Source: AlphaStar league (Vinyals et al., Nature 2019): past champions kept as frozen
    opponents; PopuLoRA (arXiv 2605.16727) §2 (PFSP matchmaking).
    """

    def __init__(self, capacity: int) -> None:
        if not (isinstance(capacity, int) and capacity >= 1):
            raise ValueError(f"HallOfFame capacity must be an int >= 1, got {capacity!r}")
        self.capacity = capacity
        self._ids: list[str] = []

    @property
    def ids(self) -> list[str]:
        """Stored ids, oldest first (a copy)."""
        return list(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, member_id: object) -> bool:
        return member_id in self._ids

    def add(self, member_id: str) -> str | None:
        """Store a champion's snapshot id. Returns the id evicted to make room, if any."""
        if member_id in self._ids:
            self._ids.remove(member_id)
        self._ids.append(member_id)
        return self._ids.pop(0) if len(self._ids) > self.capacity else None

    def sample(self, rng: np.random.Generator) -> str:
        """One stored id, uniformly at random.

        Raises:
            ValueError: the hall is empty.
        """
        if not self._ids:
            raise ValueError("HallOfFame is empty; add() a champion before sampling")
        return self._ids[int(rng.integers(len(self._ids)))]

    def state_dict(self) -> dict[str, Any]:
        """``{"capacity": int, "ids": [str, ...]}``: JSON-serialisable."""
        return {"capacity": self.capacity, "ids": list(self._ids)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from ``state_dict``.

        Raises:
            ValueError: more ids than the capacity, or repeated ids.
        """
        capacity, ids = int(state["capacity"]), [str(i) for i in state["ids"]]
        if capacity < 1 or len(ids) > capacity or len(set(ids)) != len(ids):
            raise ValueError(f"invalid HallOfFame state: capacity={capacity}, ids={ids}")
        self.capacity, self._ids = capacity, ids
