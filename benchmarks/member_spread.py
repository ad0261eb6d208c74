"""Print how a study's members spread on the held-out set (Markdown): per arm, the mean over its
runs of the best, mean and worst member, and member-mean accuracy per group of items (arith: the
cells ``d<digits>o<operators>``). Descriptive; no arm is compared.

    python benchmarks/member_spread.py docs/results/data/study-evolution \
        --arms population,no_evolution,single_agent_total --seeds 0-7

Reads each run's ``final/summary.json`` (``held_out``: every member's accuracy and counts per group).
Used by docs/results/evolution.md ("What the records show beside the reading").
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from evolora.report.data import held_out_members, load_run
from evolora.report.study_tables import select_runs
from evolora.study import parse_arms, parse_seeds


def member_spread(runs) -> dict[str, dict]:
    """{arm: {"runs": n, "best", "mean", "worst": accuracy in [0, 1], "groups": {group: member mean}}},
    each a mean over the arm's finished runs; members as :func:`evolora.report.data.held_out_members`
    (students or the agent, the base model left out)."""
    rows: dict[str, dict] = {}
    for run in runs:
        members = held_out_members(run)
        if not members:
            continue
        accuracy = list(members.values())
        row = rows.setdefault(run.mode, {"best": [], "mean": [], "worst": [], "groups": {}})
        row["best"].append(max(accuracy))
        row["mean"].append(float(np.mean(accuracy)))
        row["worst"].append(min(accuracy))
        counts = [run.summary["held_out"][member].get("by_group", {}) for member in members]
        for group in counts[0]:
            rates = [c[group]["correct"] / c[group]["total"] for c in counts]
            row["groups"].setdefault(group, []).append(float(np.mean(rates)))
    return {
        arm: {
            "runs": len(row["mean"]),
            **{k: float(np.mean(row[k])) for k in ("best", "mean", "worst")},
            "groups": {g: float(np.mean(v)) for g, v in sorted(row["groups"].items())},
        }
        for arm, row in rows.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study")
    parser.add_argument("--arms", help="only these arms, in this order")
    parser.add_argument("--seeds", help="only these seeds: 0-7 or 0,1,2")
    args = parser.parse_args()
    runs = [load_run(p) for p in sorted(Path(args.study).iterdir()) if (p / "config.yaml").is_file()]
    runs = select_runs(
        runs, parse_arms(args.arms) if args.arms else None, parse_seeds(args.seeds) if args.seeds else None
    )
    spread = member_spread(runs)
    groups = sorted({g for row in spread.values() for g in row["groups"]})
    print("| arm | runs | best member, % | member mean, % | worst member, % | " + " | ".join(groups) + " |")
    print("|---|---|---|---|---|" + "---|" * len(groups))
    for arm, row in spread.items():
        cells = [f"{100 * row[k]:.1f}" for k in ("best", "mean", "worst")]
        cells += [f"{100 * row['groups'][g]:.1f}" if g in row["groups"] else "–" for g in groups]
        print(f"| {arm} | {row['runs']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
