"""Ratings: win probability, match outcomes (PopuLoRA §2 step 6), Elo, checkpoints."""

import json
import math

import pytest

from evolora.ratings import DRAW_TOLERANCE, RatingConfig, Ratings


def make(*ids, config=None):
    ratings = Ratings(config)
    for member_id in ids:
        ratings.add(member_id)
    return ratings


def set_skill(ratings, member_id, mu, sigma):
    """Place a player at a chosen (mu, sigma) through the checkpoint interface."""
    state = ratings.state_dict()
    state["players"][member_id].update(mu=mu, sigma=sigma)
    ratings.load_state_dict(state)


def test_fresh_rating_uses_config():
    config = RatingConfig(mu0=10.0, sigma0=2.0, elo0=1500.0)
    ratings = make("a", config=config)
    assert ratings.mu("a") == 10.0 and ratings.sigma("a") == 2.0 and ratings.elo("a") == 1500.0
    assert ratings.conservative("a") == pytest.approx(10.0 - 6.0)


def test_defaults_are_trueskill():
    config = RatingConfig()
    assert (config.mu0, config.sigma0, config.beta, config.tau) == (25.0, 25 / 3, 25 / 6, 25 / 300)
    assert (config.elo0, config.elo_k) == (1000.0, 32.0)


@pytest.mark.parametrize("field, value", [("sigma0", 0.0), ("beta", -1.0), ("tau", -0.1), ("elo_k", 0.0)])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        RatingConfig(**{field: value})


def test_win_probability_equal_ratings_is_half():
    ratings = make("s", "t")
    assert ratings.win_probability("s", "t") == 0.5


@pytest.mark.parametrize("mu_s, sigma_s, mu_t, sigma_t", [(30.0, 2.0, 25.0, 5.0), (20.0, 8.0, 28.0, 1.0)])
def test_win_probability_matches_formula(mu_s, sigma_s, mu_t, sigma_t):
    ratings = make("s", "t")
    set_skill(ratings, "s", mu_s, sigma_s)
    set_skill(ratings, "t", mu_t, sigma_t)
    beta = RatingConfig().beta
    x = (mu_s - mu_t) / math.sqrt(2 * beta**2 + sigma_s**2 + sigma_t**2)
    expected = 0.5 * math.erfc(-x / math.sqrt(2))
    assert ratings.win_probability("s", "t") == pytest.approx(expected, rel=1e-12)
    assert ratings.win_probability("s", "t") + ratings.win_probability("t", "s") == pytest.approx(1.0)


@pytest.mark.parametrize(
    "solve_rate, outcome",
    [(0.9, "student"), (0.1, "teacher"), (0.5, "draw"), (0.5 + DRAW_TOLERANCE / 2, "draw"), (None, "student")],
)
def test_record_match_outcome(solve_rate, outcome):
    ratings = make("s", "t")  # equal ratings: expected p = 0.5
    assert ratings.record_match("s", "t", solve_rate) == outcome


def test_student_win_moves_mu_and_shrinks_sigma():
    ratings = make("s", "t")
    sigma0 = ratings.sigma("s")
    assert ratings.record_match("s", "t", 1.0) == "student"
    assert ratings.mu("s") > 25.0 > ratings.mu("t")
    assert ratings.sigma("s") < sigma0 and ratings.sigma("t") < sigma0
    assert ratings.elo("s") > 1000.0 > ratings.elo("t")


def test_teacher_win_moves_mu():
    ratings = make("s", "t")
    assert ratings.record_match("s", "t", 0.0) == "teacher"
    assert ratings.mu("t") > 25.0 > ratings.mu("s")
    assert ratings.elo("t") > ratings.elo("s")


def test_draw_pulls_ratings_together():
    ratings = make("s", "t")
    set_skill(ratings, "s", 30.0, 3.0)
    p = ratings.win_probability("s", "t")
    assert ratings.record_match("s", "t", p) == "draw"
    assert ratings.mu("s") < 30.0 and ratings.mu("t") > 25.0


def test_outcome_is_relative_to_expectation():
    """A strong student that solves 60% when 90% was expected has lost."""
    ratings = make("s", "t")
    set_skill(ratings, "s", 40.0, 2.0)
    assert ratings.win_probability("s", "t") > 0.6
    assert ratings.record_match("s", "t", 0.6) == "teacher"


def test_elo_is_zero_sum_and_standard():
    ratings = make("a", "b", "c")
    for student, teacher, rate in [("a", "b", 1.0), ("b", "c", 0.0), ("c", "a", None), ("a", "c", 0.5)]:
        ratings.record_match(student, teacher, rate)
        assert sum(ratings.elo(i) for i in "abc") == pytest.approx(3000.0, abs=1e-9)
    # first match by hand: equal Elo, win -> +K/2
    fresh = make("s", "t")
    fresh.record_match("s", "t", 1.0)
    assert fresh.elo("s") == pytest.approx(1016.0) and fresh.elo("t") == pytest.approx(984.0)


def test_counts_and_table():
    ratings = make("s", "t", "u")
    ratings.record_match("s", "t", 1.0)
    ratings.record_match("u", "t", 0.0)
    rows = {row["id"]: row for row in ratings.table()}
    assert rows["t"]["matches"] == 2 and rows["t"]["wins"] == 1 and rows["t"]["losses"] == 1
    assert [row["rank"] for row in ratings.table()] == [1, 2, 3]
    values = [row["conservative"] for row in ratings.table()]
    assert values == sorted(values, reverse=True)
    assert ratings.ranked(["s", "u"]) == ["s", "u"]


def test_state_round_trip_is_exact_through_json():
    ratings = make("s0", "s1", "t0", config=RatingConfig(tau=0.3))
    ratings.record_match("s0", "t0", 0.8)
    ratings.record_match("s1", "t0", 0.1234)
    ratings.record_match("s0", "t0", None)
    state = ratings.state_dict()
    restored = Ratings.from_state_dict(json.loads(json.dumps(state)))
    assert restored.state_dict() == state
    assert restored.ids == ratings.ids
    # continuing gives identical numbers
    for r in (ratings, restored):
        r.record_match("s1", "t0", 0.7)
    assert restored.state_dict() == ratings.state_dict()


def test_load_rejects_other_config():
    state = make("a").state_dict()
    with pytest.raises(ValueError, match="from_state_dict"):
        Ratings(RatingConfig(beta=1.0)).load_state_dict(state)


def test_add_remove_and_errors():
    ratings = make("a", "b")
    with pytest.raises(ValueError, match="already rated"):
        ratings.add("a")
    ratings.record_match("a", "b", 1.0)
    ratings.remove("a")
    assert "a" not in ratings and len(ratings) == 1
    ratings.add("a")  # a child reusing the slot starts fresh
    assert ratings.mu("a") == 25.0 and ratings.elo("a") == 1000.0
    with pytest.raises(KeyError, match="not rated"):
        ratings.mu("zzz")
    with pytest.raises(ValueError, match="itself"):
        ratings.record_match("a", "a", 0.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ratings.record_match("a", "b", 1.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ratings.record_match("a", "b", float("nan"))
    with pytest.raises(TypeError):
        ratings.add(3)
