"""The critic targets over seeds: best critic vs the base as critic, reranked best-of-n vs majority.

Reads the ``critic_eval`` section of each finished run's ``final/summary.json`` (runs of
``tasks/arith_critic.yaml`` with different seeds, e.g. ``evolora study tasks/arith_critic.yaml
--seeds 0,1,2 --arms population``) and prints, per seed and as a mean with a 95 % Student-t
interval over seeds (paired: same seed, same base, same held-out answers):

* the best critic's balanced accuracy (greedy verdicts; the best of the run's final critics on
  these same answers, so chosen after the fact) minus the base model's as a critic; the highest
  AUC of the critics' teacher-forced verdict scores minus the base's;
* per student, best-of-n by the best critic (the first sample it accepts, and the highest
  scored) minus majority-of-n over the same n samples.

Issue targets (arXiv 2605.16727 has no critics; SPC, arXiv 2504.19162, is the nearest design):
best critic ≥ base + 10 points with the paired interval excluding 0; critic best-of-4 ≥ majority-of-4.

    python benchmarks/critic_study.py runs/critic-study/population-s0 runs/critic-study/population-s1 ...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from evolora.report.data import t_interval


def _fmt(interval: dict, scale: float = 100.0) -> str:
    if interval["mean"] is None:
        return "-"
    if interval["low"] is None:
        return f"{interval['mean'] * scale:+.1f}"
    return f"{interval['mean'] * scale:+.1f} [{interval['low'] * scale:+.1f}, {interval['high'] * scale:+.1f}]"


def _seed_numbers(summary: dict) -> dict:
    review = summary["critic_eval"]
    judges = review["judges"]
    critics = {name: j for name, j in judges.items() if name != "base"}
    best = max(critics, key=lambda name: critics[name]["balanced_accuracy"] or 0.0)
    best_auc = max((j["auc"] for j in critics.values() if j.get("auc") is not None), default=None)
    students = {name: a for name, a in review["answerers"].items() if name != "base"}
    return {
        "seed": summary["seed"],
        "best": best,
        "best_bacc": critics[best]["balanced_accuracy"],
        "base_bacc": judges["base"]["balanced_accuracy"],
        "bacc_gain": critics[best]["balanced_accuracy"] - judges["base"]["balanced_accuracy"],
        "auc_gain": None if best_auc is None or judges["base"].get("auc") is None else best_auc - judges["base"]["auc"],
        "rerank_gain": sum(a["best_of_n"][best] - a["majority"] for a in students.values()) / len(students),
        "score_gain": (
            sum(a["best_of_n_score"][best] - a["majority"] for a in students.values()) / len(students)
            if all("best_of_n_score" in a for a in students.values())
            else None
        ),
        "majority": sum(a["majority"] for a in students.values()) / len(students),
        "best_of_n": sum(a["best_of_n"][best] for a in students.values()) / len(students),
        "reviews": judges["base"]["reviews"],
        "n": review["n"],
        "problems": review["problems"],
    }


def _training(run: Path) -> str:
    """Per-critic balanced accuracy in the step records (first and last third of the steps) and the
    critic-steps whose verdicts were near-constant (>= 95 % or <= 5 % ``correct``)."""
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    per = [(r["step"], (r.get("critic") or {}).get("per_critic") or {}) for r in steps]
    third = max(1, len(per) // 3)

    def mean(part) -> str:
        values = [
            c["balanced_accuracy"]
            for _, critics in part
            for c in critics.values()
            if c["balanced_accuracy"] is not None
        ]
        return f"{sum(values) / len(values):.3f} (n {len(values)})" if values else "-"

    said = [c["said_correct"] for _, critics in per for c in critics.values()]
    constant = sum(1 for x in said if x >= 0.95 or x <= 0.05)
    return (
        f"{run}: training balanced accuracy per critic, first {third} steps {mean(per[:third])}, last {third} "
        f"{mean(per[-third:])}; near-constant critic-steps {constant} of {len(said)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="finished run directories with critics")
    args = parser.parse_args()
    rows = [_seed_numbers(json.loads((run / "final" / "summary.json").read_text())) for run in args.runs]
    print(
        "| seed | best critic | its balanced acc | base as critic | gain (pts) | AUC gain | best-of-n / majority "
        "(student mean) | reviews |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        auc = "-" if r["auc_gain"] is None else f"{100 * r['auc_gain']:+.1f}"
        print(
            f"| {r['seed']} | {r['best']} | {100 * r['best_bacc']:.1f} % | {100 * r['base_bacc']:.1f} % | "
            f"{100 * r['bacc_gain']:+.1f} | {auc} | {100 * r['best_of_n']:.1f} / {100 * r['majority']:.1f} % | "
            f"{r['reviews']} ({r['problems']} problems x {r['n']}) |"
        )
    for key, label in (
        ("bacc_gain", "best critic - base, balanced accuracy"),
        ("auc_gain", "highest critic AUC - base AUC"),
        ("rerank_gain", "best-of-n by the best critic - majority-of-n"),
        ("score_gain", "highest-scored of n by the best critic - majority-of-n"),
    ):
        print(
            f"{label} (points, mean [95 % t-interval over {len(rows)} seeds]): "
            f"{_fmt(t_interval([r[key] for r in rows]))}"
        )
    for run in args.runs:
        if (run / "metrics.jsonl").is_file():
            print(_training(run))


if __name__ == "__main__":
    main()
