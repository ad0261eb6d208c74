"""Statistics of a study: paired differences with a t interval and an exact sign-flip permutation
p-value, and the unbiased pass@k estimator.

    diff = paired_difference([.18, .17, .20], [.15, .16, .15])   # mean, t interval, exact p, n
    pass_at_k(n=16, c=3, k=4)                                     # 1 − C(n−c, k) / C(n, k)

Sources: the sign-flip (randomisation) test for paired data (Fisher 1935); pass@k's unbiased
estimator (Chen et al. 2021, arXiv 2107.03374 §2.1); PopuLoRA (arXiv 2605.16727) §4 (population
vs single agent over seeds).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from evolora.report.data import t_interval

EXACT_MAX_N = 20
"""Largest n whose 2^n sign flips are enumerated (1,048,576); above it the test refuses."""


def sign_flip_p(differences: list[float]) -> float | None:
    """Two-sided exact p-value of H0 "the paired differences are symmetric about 0".

    Every one of the 2^n sign assignments is enumerated; p is the share whose |mean| is at
    least the observed |mean| (the observed assignment included, so p >= 2^-n). With n
    differences the smallest possible p is 2 / 2^n (n = 6: 0.031; n = 10: 0.002).

    Returns:
        p in (0, 1], or None for no differences.

    Raises:
        ValueError: more than :data:`EXACT_MAX_N` differences.
    """
    values = np.asarray([float(d) for d in differences], dtype=float)
    n = len(values)
    if n == 0:
        return None
    if n > EXACT_MAX_N:
        raise ValueError(f"exact sign-flip test enumerates 2^n assignments; n = {n} > {EXACT_MAX_N}")
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    means = np.abs(signs @ values) / n
    observed = abs(values.mean())
    return float(np.mean(means >= observed - 1e-12))


def paired_difference(a: list[float | None], b: list[float | None]) -> dict:
    """Arm a minus arm b, pair by pair (None pairs dropped): t interval of the mean and exact p.

    Returns:
        {"mean", "low", "high", "n", "values", "p"} (see :func:`evolora.report.data.t_interval`;
        ``p`` from :func:`sign_flip_p`, None when n = 0).
    """
    diffs = [x - y for x, y in zip(a, b) if x is not None and y is not None]
    out = t_interval(diffs)
    out["p"] = sign_flip_p(diffs)
    return out


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 − C(n − c, k) / C(n, k).

    Raises:
        ValueError: unless 0 <= c <= n and 1 <= k <= n.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)
