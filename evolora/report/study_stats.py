"""The unrounded numbers of a study's comparisons and targets (``stats.json``), so that a reading
rule ("the interval excludes 0", "ρ ≥ 0.5", "S > 0 at ≥ 70 % of events") is applied before rounding.

    rows  = paired_comparisons(by_arm, "population")     # reference − arm, paired by seed
    stats = study_stats(runs, by_arm, "population")      # everything behind the Markdown tables

The Markdown tables (:mod:`evolora.report.study_tables`, :mod:`evolora.report.selection_tables`)
are rendered from the same functions. Source: PopuLoRA (arXiv 2605.16727) §4.
"""

from __future__ import annotations

import numpy as np

from evolora.report.breeding import POSITIVE
from evolora.report.data import RunData, held_out_members
from evolora.report.selection_tables import birth_correlations, event_summaries, fitness_correlations
from evolora.report.stats import bootstrap_difference, paired_difference

BOOTSTRAP_SEED = 0
"""Seed of the item × seed bootstrap's generator (the tables replay exactly)."""

BOOTSTRAP_REPLICATES = 4000
"""Replicates of the item × seed bootstrap (percentile interval, 2.5 and 97.5 %)."""


def paired_comparisons(by_arm: dict[str, dict[int, dict]], reference: str) -> list[dict]:
    """Each arm against ``reference`` on the seeds they share: member-mean and best-member held-out
    accuracy, ``reference − arm``.

    Args:
        by_arm: {arm: {seed: numbers with "mean", "best" (fractions) and "items" ((N,) or None)}}
            (:attr:`evolora.report.study_tables.StudyTables.by_arm`).
        reference: the arm the others are compared with.

    Returns:
        [{"comparison": "reference − arm", "seeds": the common seeds (empty: none), "mean" and "best":
        :func:`evolora.report.stats.paired_difference` (fractions; t interval, exact sign-flip p),
        "bootstrap": :func:`evolora.report.stats.bootstrap_difference` of the member mean over
        items and seeds, or None when a run lacks its items or the runs hold different items}].
    """
    base = by_arm.get(reference, {})
    rows = []
    for arm, seeds in by_arm.items():
        if arm == reference:
            continue
        common = sorted(set(seeds) & set(base))
        row = {"comparison": f"{reference} − {arm}", "seeds": common, "mean": None, "best": None, "bootstrap": None}
        if common:
            row["mean"] = paired_difference([base[s]["mean"] for s in common], [seeds[s]["mean"] for s in common])
            row["best"] = paired_difference([base[s]["best"] for s in common], [seeds[s]["best"] for s in common])
            row["bootstrap"] = _bootstrap(base, seeds, common)
        rows.append(row)
    return rows


def _bootstrap(base: dict[int, dict], seeds: dict[int, dict], common: list[int]) -> dict | None:
    items_a = {s: base[s]["items"] for s in common if base[s]["items"] is not None}
    items_b = {s: seeds[s]["items"] for s in common if seeds[s]["items"] is not None}
    if not len(items_a) == len(items_b) == len(common):
        return None
    try:
        return bootstrap_difference(
            items_a, items_b, generator=np.random.default_rng(BOOTSTRAP_SEED), replicates=BOOTSTRAP_REPLICATES
        )
    except ValueError:  # runs evaluated on different items
        return None


def study_stats(runs: list[RunData], by_arm: dict[str, dict[int, dict]], reference: str) -> dict:
    """Everything the study's tables round, unrounded and JSON-ready.

    Args:
        runs: the runs selected for the study (finished or not); by_arm: the finished runs' numbers;
        reference: the arm the others are compared with.

    Returns:
        {"runs": {arm: {"finished": seeds, "unfinished": seeds}}, "member_mean": {arm: {seed: member-mean
        held-out accuracy}}, "comparisons":
        :func:`paired_comparisons`, "fitness_rho": {arm: {signal: pooled ρ record}}, "birth_rho":
        {"arm/role": pooled ρ record}, "events":
        :func:`evolora.report.selection_tables.event_summaries`, "positive_above": the S threshold, and the
        bootstrap's "bootstrap_seed" and "bootstrap_replicates"}.
    """
    finished = [run for run in runs if run.summary is not None and held_out_members(run)]
    listed: dict[str, dict[str, list[int]]] = {}
    for run in runs:
        state = "finished" if run in finished else "unfinished"
        listed.setdefault(run.mode, {"finished": [], "unfinished": []})[state].append(run.seed)
    return {
        "runs": {arm: {k: sorted(v) for k, v in states.items()} for arm, states in listed.items()},
        "member_mean": {arm: {seed: n["mean"] for seed, n in seeds.items()} for arm, seeds in by_arm.items()},
        "comparisons": paired_comparisons(by_arm, reference),
        "fitness_rho": fitness_correlations(finished),
        "birth_rho": {f"{arm}/{role}": pooled for (arm, role), pooled in birth_correlations(finished).items()},
        "events": event_summaries(finished),
        "positive_above": POSITIVE,
        "bootstrap_seed": BOOTSTRAP_SEED,
        "bootstrap_replicates": BOOTSTRAP_REPLICATES,
    }
