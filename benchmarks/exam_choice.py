"""The pre-stated rule that picks the exam's score for the outer-loop study (docs/results/evolution.md).

    python benchmarks/exam_choice.py runs/exam-calibration --seeds 100,101 [--write runs/study-evolution/score]

Reads each calibration run's events (metrics.jsonl records with ``fitness``), where every student has
its exam accuracy, exam log-prob, dev accuracy, μ − 3σ and audited held-out accuracy. Per signal, the
within-event Spearman ρ against held-out accuracy is pooled over every event of every run (each
event's values centred on the event's mean: :func:`evolora.fitness.pooled_rank_correlation`). The
rule: ``logprob`` when its pooled ρ exceeds that of ``accuracy``, else ``accuracy``. Prints a JSON
table; ``--write`` stores the choice once (an existing choice is never overwritten).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from evolora.fitness import pooled_rank_correlation

SIGNALS = ("accuracy", "logprob", "validation", "rating")


def events(run_dir: Path) -> list[dict]:
    """The students' signals at each event of one run: [{member: {signal: value}}]."""
    found = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "fitness" in record:
            found.append({m: e for m, e in record["fitness"]["members"].items() if e["role"] == "student"})
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("--seeds", default="100,101")
    parser.add_argument("--arm", default="population")
    parser.add_argument("--write", type=Path)
    args = parser.parse_args()
    all_events = [e for seed in args.seeds.split(",") for e in events(args.study / f"{args.arm}-s{seed}")]
    table = {}
    for signal in SIGNALS:
        pairs = [
            ({m: entry.get(signal) for m, entry in event.items()}, {m: entry["held_out"] for m, entry in event.items()})
            for event in all_events
        ]
        table[signal] = pooled_rank_correlation(pairs)
    rho = {s: table[s]["rho"] for s in SIGNALS}
    choice = (
        "logprob"
        if rho["logprob"] is not None and (rho["accuracy"] is None or rho["logprob"] > rho["accuracy"])
        else "accuracy"
    )
    print(json.dumps({"events": len(all_events), "pooled": table, "choice": choice}, indent=1))
    if args.write is not None and not args.write.exists():
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(choice + "\n")


if __name__ == "__main__":
    main()
