"""Study statistics against independent brute force: the exact sign-flip p-value against a
hand-rolled enumeration, pass@k against the mean over every k-subset, the interval against scipy."""

from __future__ import annotations

import itertools
import math

import pytest
from scipy import stats

from evolora.evaluation.sampled import pass_at_k
from evolora.report.stats import paired_difference, sign_flip_p


def _enumerated_p(diffs):
    observed = abs(sum(diffs))
    hits = 0
    for mask in range(2 ** len(diffs)):
        total = sum(d if not (mask >> i) & 1 else -d for i, d in enumerate(diffs))
        hits += abs(total) >= observed - 1e-12
    return hits / 2 ** len(diffs)


@pytest.mark.parametrize(
    "diffs",
    [[-0.6, 2.8, 5.6], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [0.5, -0.5, 0.25, 1.5, -2.0], [3.0] * 8, [0.0, 0.0, 1.0]],
)
def test_sign_flip_p_equals_exhaustive_enumeration(diffs):
    assert sign_flip_p(diffs) == pytest.approx(_enumerated_p(diffs))


def test_sign_flip_extremes():
    assert sign_flip_p([1.0] * 6) == pytest.approx(2 / 64)  # all positive: only the two extreme assignments
    assert sign_flip_p([]) is None
    with pytest.raises(ValueError, match="enumerates"):
        sign_flip_p([1.0] * 21)


@pytest.mark.parametrize("n, c, k", [(16, 3, 4), (8, 0, 1), (8, 8, 4), (5, 2, 5), (10, 7, 4)])
def test_pass_at_k_equals_the_mean_over_every_subset(n, c, k):
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    brute = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(brute)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_paired_difference_interval_matches_scipy():
    a, b = [0.18, 0.17, 0.20, None], [0.15, 0.16, 0.15, 0.9]
    out = paired_difference(a, b)
    diffs = [0.03, 0.01, 0.05]
    low, high = stats.t.interval(0.95, 2, loc=sum(diffs) / 3, scale=stats.sem(diffs))
    assert out["n"] == 3 and out["low"] == pytest.approx(low) and out["high"] == pytest.approx(high)
    assert out["p"] == pytest.approx(0.25) and math.isclose(out["mean"], 0.03)


def test_bootstrap_difference_over_seeds_and_items():
    import numpy as np

    from evolora.report.stats import bootstrap_difference

    rng = np.random.default_rng(0)
    items = rng.random(90) < 0.3
    a = {s: (items | (rng.random(90) < 0.1)).astype(float) for s in range(6)}  # a solves a few more items
    b = {s: items.astype(float) for s in range(6)}
    result = bootstrap_difference(a, b, generator=np.random.default_rng(1))
    assert result["seeds"] == 6 and result["items"] == 90
    assert 0 < result["low"] < result["mean"] < result["high"] < 0.2
    same = bootstrap_difference(b, b, generator=np.random.default_rng(1))
    assert same["low"] == same["high"] == 0.0
    again = bootstrap_difference(a, b, generator=np.random.default_rng(1))
    assert again == result  # replays with the generator
    # one seed: the interval still reflects the items
    one = bootstrap_difference({0: a[0]}, {0: b[0]}, generator=np.random.default_rng(1))
    assert one["low"] < one["mean"] < one["high"]
    assert bootstrap_difference({1: a[0]}, {0: b[0]}, generator=np.random.default_rng(1))["mean"] is None
