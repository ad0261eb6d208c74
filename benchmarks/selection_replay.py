"""Replay every selection operator on the recorded events of exam-fitness runs: whose parents would
have been better on held-out problems?

    python benchmarks/selection_replay.py RUN_DIR [RUN_DIR ...] [--draws 20000] [--json OUT]

At each event a run records every student's exam fitness, its outcome on each exam problem and,
with ``evolution.audit``, its held-out accuracy (never used to select). For each selection operator
at its default parameters (and uniform drawing as the reference), the replay takes the chance that
each student is drawn as a parent (exact, :func:`evolora.operators.selection_chances`; estimated
from ``--draws`` draws where no exact form holds, e.g. lexicase on log-probabilities) and prints the
expected selection differential S = Σ p_i x_i − mean(x) of the students on audited held-out accuracy
and on exam accuracy, in points, with the share of events where it is positive (the study's target:
≥ 70 % on held-out). The population at each event is the recorded one, shaped by the operator the
run used: the replay measures each operator's choice at that event, not a run it would have made.
A second table gives how far the realised S strays from that expectation: its exact standard
deviation at each event's recorded number of students' parent draws, for independent draws and for
stochastic universal sampling (``evolution.sampling``), of the parents as drawn (the loop replaces
a crossover's repeated parent by the best other member; the spread leaves that out).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from evolora.event import exam_cases
from evolora.operators import REGISTRY, independent_spread, selection_chances, universal_spread
from evolora.operators.selection import replaced_indices
from evolora.report.breeding import POSITIVE
from evolora.report.data import load_run

OPERATORS = ("tournament", "truncation", "rank", "fitness_proportional", "lexicase")
"""The registered selections replayed, each at its defaults (``uniform`` is added as the reference)."""

SIGNALS = {"held_out": "audited held-out accuracy", "accuracy": "exam accuracy"}
"""Signals whose expected S is reported: the member record's key -> its label."""

SPREADS = {"independent": independent_spread, "universal": universal_spread}
"""``evolution.sampling`` -> the exact SD of the realised S of its parent draws (:mod:`evolora.operators.sampling`)."""


def events(run_dir: Path) -> list[dict]:
    """The students of each event with exam outcomes and held-out audit: [{"ids", "fitness", "cases",
    "values": {signal: (P,)}, "draws": the students' parents recorded at the event}], in the run's
    parent pool (``evolution.parent_pool``)."""
    run = load_run(run_dir)
    evolution = run.config["evolution"]
    found = []
    for step in (step for step in run.metrics if step.get("fitness")):
        record = step["fitness"]
        if "exam" not in record:
            continue
        cases = exam_cases(record, evolution["fitness"]["score"])
        ids = [m for m, entry in record["members"].items() if entry["role"] == "student" and "held_out" in entry]
        if not ids:  # no audit at this event
            continue
        fitness = torch.tensor([record["members"][m]["fitness"] for m in ids], dtype=torch.float64)
        if evolution["parent_pool"] == "survivors":
            lost = set(replaced_indices(fitness, evolution["gamma"], evolution["elitism"]).tolist())
            keep = [i for i in range(len(ids)) if i not in lost]
            ids, fitness = [ids[i] for i in keep], fitness[keep]
        values = {s: torch.tensor([record["members"][m][s] for m in ids], dtype=torch.float64) for s in SIGNALS}
        draws = sum(len(b["parents"]) for b in step.get("births", []) if b["role"] == "student")
        found.append(
            {
                "ids": ids,
                "fitness": fitness,
                "cases": torch.stack([cases[m] for m in ids]),
                "values": values,
                "draws": draws,
            }
        )
    return found


def chances(name: str, event: dict, draws: int, seed: int) -> torch.Tensor:
    """(P,) chance that each student of ``event`` is drawn as a parent by operator ``name``: exact where
    a closed form holds, else estimated from ``draws`` draws of a generator seeded ``seed``."""
    size = event["fitness"].numel()
    if name == "uniform":
        return torch.full((size,), 1.0 / size, dtype=torch.float64)
    params = REGISTRY.validate("selection", name)
    try:
        exact = selection_chances(name, event["fitness"], params, event["cases"])
    except ValueError:  # e.g. lexicase with a tolerance on continuous scores
        exact = None
    if exact is not None:
        return exact
    generator = torch.Generator().manual_seed(seed)
    spec = REGISTRY.get("selection", name)
    picked = spec.select(event["fitness"], draws, generator=generator, cases=event["cases"], **params)
    return torch.bincount(picked, minlength=size).double() / draws


def replay(run_dirs: list[Path], draws: int, seed: int) -> dict:
    """{operator: {signal: {"mean": S in points, "positive": events with S > 0, "events": n},
    "spread": {sampling: mean SD of the realised S on held-out, points}}}: the spread at each event's
    recorded number of parent draws, of independent draws and of universal sampling (exact)."""
    all_events = [event for run_dir in run_dirs for event in events(run_dir)]
    table = {}
    for name in ("uniform", *OPERATORS):
        rows = {signal: [] for signal in SIGNALS}
        spreads = {sampling: [] for sampling in SPREADS}
        for event in all_events:
            p = chances(name, event, draws, seed)
            for signal, values in event["values"].items():
                rows[signal].append(100 * float((p * values).sum() - values.mean()))
            if event["draws"]:
                for sampling, spread in SPREADS.items():
                    spreads[sampling].append(100 * spread(p, event["values"]["held_out"], event["draws"]))
        table[name] = {
            signal: {
                "mean": sum(s) / len(s) if s else None,
                "positive": sum(v / 100 > POSITIVE for v in s),  # s in points
                "events": len(s),
            }
            for signal, s in rows.items()
        }
        table[name]["spread"] = {sampling: sum(s) / len(s) if s else None for sampling, s in spreads.items()}
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="run directories of exam-fitness runs with an audit")
    parser.add_argument(
        "--draws", type=int, default=20_000, help="parent draws per operator and event where no exact form holds"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the selection stream")
    parser.add_argument("--json", type=Path, help="also write the table as JSON here")
    args = parser.parse_args()
    missing = [str(run) for run in args.runs if not (run / "metrics.jsonl").is_file()]
    if missing:
        parser.error(f"no metrics.jsonl in {', '.join(missing)}")
    empty = [str(run) for run in args.runs if not events(run)]
    if empty:
        parser.error(
            f"no event with an exam and an audit in {', '.join(empty)}: the replay needs runs with "
            "evolution.fitness: exam and evolution.audit > 0"
        )
    table = replay(args.runs, args.draws, args.seed)
    print("| operator | " + " | ".join(f"S on {label}, points (S > 0 events)" for label in SIGNALS.values()) + " |")
    print("|---|" + "---|" * len(SIGNALS))
    for name, row in table.items():
        cells = [
            f"{row[signal]['mean']:+.2f} ({row[signal]['positive']} of {row[signal]['events']})" for signal in SIGNALS
        ]
        print(f"| `{name}` | " + " | ".join(cells) + " |")
    print("\n| operator | " + " | ".join(f"SD of realised S on held-out, {s} draws, points" for s in SPREADS) + " |")
    print("|---|" + "---|" * len(SPREADS))
    for name, row in table.items():
        cells = ["n/a" if v is None else f"{v:.2f}" for v in row["spread"].values()]
        print(f"| `{name}` | " + " | ".join(cells) + " |")
    if args.json:
        args.json.write_text(json.dumps({"draws": args.draws, "seed": args.seed, "table": table}, indent=1) + "\n")


if __name__ == "__main__":
    main()
