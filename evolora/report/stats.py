"""Statistics of a study: paired differences with a t interval and an exact sign-flip permutation
p-value, and a crossed bootstrap over seeds and items.

    diff = paired_difference([.18, .17, .20], [.15, .16, .15])   # mean, t interval, exact p, n

The unbiased pass@k estimator is :func:`evolora.evaluation.sampled.pass_at_k`, beside the sampled
evaluation that uses it. Sources: the sign-flip (randomisation) test for paired data (Fisher 1935);
PopuLoRA (arXiv 2605.16727) §4 (population vs single agent over seeds).
"""

from __future__ import annotations

import itertools

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


def bootstrap_difference(
    a: dict[int, np.ndarray], b: dict[int, np.ndarray], *, generator: np.random.Generator, replicates: int = 4000
) -> dict:
    """Arm a minus arm b over seeds *and* items: a crossed bootstrap of the mean paired difference.

    Args:
        a: {seed: per-item accuracy of the arm's run, (N,) floats in [0, 1]} (e.g. the member
            mean of per-item correctness); the same N items, in the same order, in every run.
        b: the other arm, like ``a``; only the seeds in both count.
        generator: drives the resampling (explicit, so the interval replays).
        replicates: bootstrap replicates (>= 100).

    Returns:
        {"mean", "low", "high" (the 2.5 and 97.5 % percentiles), "seeds", "items"}; each replicate
        resamples the common seeds with replacement and, independently, the items (one item
        resample shared by every seed: items are a crossed factor). mean/low/high are fractions
        (multiply by 100 for points); None when no seed is in common.

    Raises:
        ValueError: runs with different item counts, or fewer than 100 replicates.

    Source: the crossed (two-way) bootstrap of seeds × items; evolora's own use.
    """
    if replicates < 100:
        raise ValueError(f"replicates must be >= 100, got {replicates}")
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return {"mean": None, "low": None, "high": None, "seeds": 0, "items": 0}
    diffs = np.stack(
        [
            np.asarray(a[s], dtype=float) - np.asarray(b[s], dtype=float)
            for s in seeds
            if len(a[s]) == len(b[s]) == len(a[seeds[0]])
        ]
        or [np.zeros(0)]
    )
    if diffs.shape[0] != len(seeds):
        raise ValueError("every run of the comparison needs the same held-out items")
    n_seeds, n_items = diffs.shape
    seed_counts = generator.multinomial(n_seeds, np.full(n_seeds, 1 / n_seeds), size=replicates)
    item_counts = generator.multinomial(n_items, np.full(n_items, 1 / n_items), size=replicates)
    stats = np.einsum("bs,sn,bn->b", seed_counts, diffs, item_counts) / (n_seeds * n_items)
    low, high = np.percentile(stats, [2.5, 97.5])
    return {"mean": float(diffs.mean()), "low": float(low), "high": float(high), "seeds": n_seeds, "items": n_items}


def fixed(value: float, digits: int = 1, *, signed: bool = False) -> str:
    """``value`` to ``digits`` decimals (with its sign when ``signed``), never a negative zero:
    ``fixed(-0.04)`` is ``0.0``, ``fixed(-0.001, 2, signed=True)`` ``+0.00``, ``fixed(-0.05)`` ``-0.1``."""
    return f"{round(value, digits) + 0.0:{'+' if signed else ''}.{digits}f}"
