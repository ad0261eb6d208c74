"""The end-of-run verdict against independent references: Wilson intervals against statsmodels-style
known values, Newcombe's difference interval, the trends and the sentence."""

from __future__ import annotations

import pytest

from evolora.report.verdict import difference, run_verdict, trends, wilson


def test_wilson_matches_known_values():
    # Newcombe (1998), table I: 81/263 -> 0.2553 to 0.3662; 15/148 -> 0.0624 to 0.1605; 0/10 -> 0 to 0.2775
    assert wilson(81, 263)[1:] == pytest.approx((0.2553, 0.3662), abs=1e-4)
    assert wilson(15, 148)[1:] == pytest.approx((0.0624, 0.1605), abs=1e-4)
    assert wilson(0, 10)[1:] == pytest.approx((0.0, 0.2775), abs=1e-4)
    with pytest.raises(ValueError):
        wilson(3, 0)


def test_newcombe_difference_matches_the_paper():
    # Newcombe (1998) example for differences: 56/70 - 48/80 -> 0.2000, interval 0.0524 to 0.3339
    delta, low, high = difference((56, 70), (48, 80))
    assert (delta, low, high) == pytest.approx((0.2, 0.0524, 0.3339), abs=1e-4)


def _record(validity, solve, mus):
    return {
        "validity_rate": validity,
        "solve_rate": solve,
        "ratings": {f"s{i}": {"role": "student", "mu": mu, "sigma": 1.0} for i, mu in enumerate(mus)},
    }


def test_trends_compare_the_first_and_last_fifth():
    records = [_record(0.1, 0.0, [25, 25])] * 5 + [_record(0.5, 0.2, [20, 30])] * 5
    got = trends(records)
    assert got["validity"] == pytest.approx((0.1, 0.5)) and got["solve rate"] == pytest.approx((0.0, 0.2))
    assert got["student rating spread"] == pytest.approx((0.0, 10.0))


def test_the_sentence_says_whether_the_gain_is_outside_the_noise():
    small = {
        "held_out": {
            "base": {"correct": 0, "total": 16, "accuracy": 0.0},
            "s1": {"correct": 1, "total": 16, "accuracy": 1 / 16},
        }
    }
    verdict = run_verdict(small, [])
    assert "within the noise" in verdict["sentence"] and verdict["held_out"]["s1"]["n"] == 16
    large = {
        "held_out": {
            "base": {"correct": 8, "total": 90, "accuracy": 8 / 90},
            "s1": {"correct": 30, "total": 90, "accuracy": 1 / 3},
        }
    }
    assert "outside the noise" in run_verdict(large, [])["sentence"]
    assert "nothing to compare" in run_verdict({"held_out": {}}, [])["sentence"]
    assert "cache" not in run_verdict(large, [])["sentence"]
    large["held_out"]["base"]["cached"] = True  # the base's answers came from evolora's cache: the summary says so
    assert "reused from evolora's cache" in run_verdict(large, [])["sentence"]


def test_the_in_run_sentence_compares_the_first_and_last_steps_solve_rates():
    from evolora.report.verdict import solve_rate_sentence

    rising = [{"graded": 40, "correct": c} for c in (2, 3, 10, 20, 30)]
    assert solve_rate_sentence(rising).startswith("The students' in-run solve rate on valid problems rose: 2/40")
    flat = [{"graded": 8, "correct": 1}] * 5
    assert "did not change beyond the noise" in solve_rate_sentence(flat)
    assert "cannot be compared" in solve_rate_sentence([{"graded": 0, "correct": 0}, {"graded": 4, "correct": 1}])
    assert solve_rate_sentence([{"solve_rate": 0.5}] * 3) == ""
    assert run_verdict({"held_out": {}}, rising)["in_run"].endswith("].")
