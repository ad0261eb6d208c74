"""PFSP matchmaking (PopuLoRA §2 step 1) and the hall of fame."""

import json
from collections import Counter

import numpy as np
import pytest

from evolora.matchmaking import (
    SCHEMES,
    WEIGHTINGS,
    HallOfFame,
    get_weighting,
    hard,
    pfsp_pairs,
    pfsp_probabilities,
    register_weighting,
    uniform,
    variance,
)


class FixedP:
    """Ratings stand-in with fixed P(student beats teacher)."""

    def __init__(self, table):
        self.table = table  # {(student, teacher): p}

    def win_probability(self, student_id, teacher_id):
        return self.table[(student_id, teacher_id)]


P = {0.2: "s0", 0.5: "s1", 0.9: "s2"}
RATINGS = FixedP({(s, t): p for p, s in P.items() for t in ("t0", "t1", "t2", "t3", "t4")})
STUDENTS = ["s0", "s1", "s2"]


def test_weighting_functions():
    p = np.array([0.0, 0.2, 0.5, 0.9, 1.0])
    np.testing.assert_allclose(variance(p), [0.0, 0.16, 0.25, 0.09, 0.0])
    np.testing.assert_allclose(hard(p, 2.0), [1.0, 0.64, 0.25, 0.01, 0.0])
    np.testing.assert_allclose(hard(p, 0.0), np.ones(5))
    np.testing.assert_array_equal(uniform(p), np.ones(5))
    assert set(WEIGHTINGS) >= {"variance", "hard", "uniform"}


@pytest.mark.parametrize(
    "weighting, k, expected",
    [
        # p = 0.2, 0.5, 0.9
        ("variance", 2.0, np.array([0.16, 0.25, 0.09]) / 0.50),
        ("hard", 2.0, np.array([0.64, 0.25, 0.01]) / 0.90),
        ("hard", 1.0, np.array([0.8, 0.5, 0.1]) / 1.4),
        ("uniform", 2.0, np.full(3, 1 / 3)),
    ],
)
def test_probabilities_hand_computed(weighting, k, expected):
    probs = pfsp_probabilities("t0", STUDENTS, RATINGS, weighting=weighting, k=k)
    np.testing.assert_allclose(probs, expected, rtol=1e-12)


def test_all_zero_weights_fall_back_to_uniform():
    ratings = FixedP({("a", "t"): 0.0, ("b", "t"): 1.0})
    np.testing.assert_allclose(pfsp_probabilities("t", ["a", "b"], ratings), [0.5, 0.5])
    pairs = pfsp_pairs(["t"], ["a", "b"], ratings, rng=np.random.default_rng(0))
    assert pairs[0][1] in {"a", "b"}


def test_empirical_frequencies_follow_distribution():
    rng = np.random.default_rng(1)
    counts = Counter(
        s
        for _ in range(20000)
        for _, s in pfsp_pairs(["t0"], STUDENTS, RATINGS, scheme="per_teacher_with_replacement", rng=rng)
    )
    freq = np.array([counts[s] for s in STUDENTS]) / 20000
    np.testing.assert_allclose(freq, [0.32, 0.50, 0.18], atol=0.015)


def test_without_replacement_uses_distinct_students():
    rng = np.random.default_rng(2)
    for _ in range(200):
        pairs = pfsp_pairs(["t0", "t1", "t2"], STUDENTS, RATINGS, weighting="hard", k=4.0, rng=rng)
        assert [t for t, _ in pairs] == ["t0", "t1", "t2"]
        assert sorted(s for _, s in pairs) == STUDENTS


def test_without_replacement_reuses_after_all_used():
    rng = np.random.default_rng(3)
    teachers = ["t0", "t1", "t2", "t3", "t4"]
    for _ in range(100):
        counts = Counter(s for _, s in pfsp_pairs(teachers, STUDENTS, RATINGS, rng=rng))
        assert set(counts) == set(STUDENTS) and sorted(counts.values()) == [1, 2, 2]


def test_fewer_teachers_than_students():
    pairs = pfsp_pairs(["t0"], STUDENTS, RATINGS, rng=np.random.default_rng(0))
    assert len(pairs) == 1 and pairs[0][0] == "t0"


def test_round_robin_is_all_pairs_and_deterministic():
    pairs = pfsp_pairs(["t0", "t1"], STUDENTS, RATINGS, scheme="round_robin", rng=np.random.default_rng(0))
    assert pairs == [(t, s) for t in ("t0", "t1") for s in STUDENTS]
    again = pfsp_pairs(["t0", "t1"], STUDENTS, RATINGS, scheme="round_robin", rng=np.random.default_rng(9))
    assert again == pairs


@pytest.mark.parametrize("scheme", SCHEMES)
def test_same_seed_same_pairs(scheme):
    teachers = ["t0", "t1", "t2", "t3"]
    runs = [pfsp_pairs(teachers, STUDENTS, RATINGS, scheme=scheme, rng=np.random.default_rng(42)) for _ in range(2)]
    assert runs[0] == runs[1]


def test_seeds_differ():
    teachers = ["t0", "t1", "t2", "t3", "t4"]
    draws = {tuple(pfsp_pairs(teachers, STUDENTS, RATINGS, rng=np.random.default_rng(seed))) for seed in range(20)}
    assert len(draws) > 1


def test_with_real_ratings():
    from evolora.ratings import Ratings

    ratings = Ratings()
    for member_id in ["t0", "t1", "s0", "s1"]:
        ratings.add(member_id)
    ratings.record_match("s0", "t0", 1.0)
    probs = pfsp_probabilities("t1", ["s0", "s1"], ratings, weighting="variance")
    assert probs[1] > probs[0]  # s1 (unplayed, equal to t1) gives the more balanced match
    pairs = pfsp_pairs(["t0", "t1"], ["s0", "s1"], ratings, rng=np.random.default_rng(0))
    assert sorted(s for _, s in pairs) == ["s0", "s1"]


def test_bad_names_raise_with_allowed_list():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"allowed: \['hard', 'uniform', 'variance'"):
        pfsp_pairs(["t0"], STUDENTS, RATINGS, weighting="varience", rng=rng)
    with pytest.raises(ValueError, match="allowed: .*per_teacher_without_replacement.*round_robin"):
        pfsp_pairs(["t0"], STUDENTS, RATINGS, scheme="random", rng=rng)
    with pytest.raises(ValueError, match="allowed"):
        pfsp_probabilities("t0", STUDENTS, RATINGS, weighting="nope")
    with pytest.raises(ValueError, match="k must be >= 0"):
        get_weighting("hard", k=-1.0)


def test_other_input_errors():
    rng = np.random.default_rng(0)
    with pytest.raises(TypeError, match="Generator"):
        pfsp_pairs(["t0"], STUDENTS, RATINGS, rng=np.random.RandomState(0))
    with pytest.raises(ValueError, match="distinct"):
        pfsp_pairs(["t0", "t0"], STUDENTS, RATINGS, rng=rng)
    with pytest.raises(ValueError, match="no students"):
        pfsp_pairs(["t0"], [], RATINGS, rng=rng)
    assert pfsp_pairs([], STUDENTS, RATINGS, rng=rng) == []


def test_register_weighting_rejects_duplicates():
    with pytest.raises(ValueError, match="already registered"):
        register_weighting("variance", variance)
    name = "test_cubic"
    register_weighting(name, lambda p, k=2.0: np.asarray(p) ** k, params=("k",))
    try:
        probs = pfsp_probabilities("t0", STUDENTS, RATINGS, weighting=name, k=1.0)
        np.testing.assert_allclose(probs, np.array([0.2, 0.5, 0.9]) / 1.6)
    finally:
        WEIGHTINGS.pop(name)


def test_hall_of_fame():
    hall = HallOfFame(capacity=2)
    with pytest.raises(ValueError, match="empty"):
        hall.sample(np.random.default_rng(0))
    assert hall.add("a") is None and hall.add("b") is None
    assert hall.add("c") == "a" and hall.ids == ["b", "c"]
    hall.add("b")  # re-adding moves to newest
    assert hall.ids == ["c", "b"]
    samples = {hall.sample(np.random.default_rng(seed)) for seed in range(20)}
    assert samples == {"b", "c"}
    state = json.loads(json.dumps(hall.state_dict()))
    restored = HallOfFame(capacity=1)
    restored.load_state_dict(state)
    assert restored.state_dict() == hall.state_dict()
    assert restored.sample(np.random.default_rng(5)) == hall.sample(np.random.default_rng(5))
    with pytest.raises(ValueError):
        HallOfFame(0)
    with pytest.raises(ValueError):
        restored.load_state_dict({"capacity": 1, "ids": ["a", "b"]})
