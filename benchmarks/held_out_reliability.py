"""Can the held-out items tell a run's members apart? Per arm of a study: how many items two
members of one run answer differently, their accuracy gap in items, and the within-run split-half
agreement of the held-out ranking (:func:`evolora.fitness.split_half_agreement`): stepped up to all
items by Spearman–Brown, its square root bounds the validity any fitness can show against them.

    python benchmarks/held_out_reliability.py docs/results/data/study-popsize --arms population,size4 \
        --seeds 0-5 --sizes 135,36

Reads each run's per-item answers (:func:`evolora.report.study_tables.member_correctness`); no model.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np

from evolora.fitness import split_half_agreement
from evolora.report.data import load_run
from evolora.report.study_tables import member_correctness
from evolora.study import parse_arms, parse_seeds

SEED = 0
"""Seed of the split generator (the figures replay exactly)."""


def member_items(run_dir: Path) -> dict[str, np.ndarray]:
    """{member: per-item correctness (N,) in {0, 1}} of a finished run's solving members."""
    rows = member_correctness(load_run(run_dir))
    if rows is None:
        raise SystemExit(f"{run_dir}: no per-item held-out answers for every member")
    return rows


def disagreement(runs: list[dict[str, np.ndarray]]) -> dict:
    """Over every pair of members of one run: items answered differently and the accuracy gap in items."""
    differ, gap = [], []
    for run in runs:
        for a, b in itertools.combinations(sorted(run), 2):
            differ.append(int((run[a] != run[b]).sum()))
            gap.append(abs(int(run[a].sum()) - int(run[b].sum())))
    if not differ:
        return {"pairs": 0}
    return {
        "pairs": len(differ),
        "differ_mean": float(np.mean(differ)),
        "differ_min": min(differ),
        "differ_max": max(differ),
        "gap_mean": float(np.mean(gap)),
        "gap_max": max(gap),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("--arms", required=True, help="arms, e.g. population,size4")
    parser.add_argument("--seeds", required=True, help="seeds, e.g. 0-5")
    parser.add_argument("--sizes", default="135,36", help="items on the first side of each split (default 135,36)")
    parser.add_argument("--splits", type=int, default=200, help="random splits per size (default 200)")
    args = parser.parse_args(argv)
    result = {}
    for arm in parse_arms(args.arms):
        runs = [member_items(args.study / f"{arm}-s{seed}") for seed in parse_seeds(args.seeds)]
        entry = {"runs": len(runs), **disagreement(runs)}
        for size in (int(s) for s in args.sizes.split(",")):
            entry[f"split_{size}"] = split_half_agreement(
                runs, size=size, splits=args.splits, generator=np.random.default_rng(SEED)
            )
        result[arm] = entry
        print(arm, json.dumps(entry, indent=1), flush=True)
    return result


if __name__ == "__main__":
    main()
