"""Evaluate every finished run of a study again under changed keys (a larger held-out grid), as a
new study directory of records that `study_report.py` reads; the runs are left as they are.

    python benchmarks/study_reevaluate.py runs/study-arith --out runs/study-arith-grid450 \
        --set task.params.eval_per_cell=50 --limit 450 --arms population,single_agent --seeds 0-9

The base model is evaluated once, with the first run, and its numbers are copied into the other
records (same model, same items, greedy: the same answers). Finished records in --out are
skipped, so the script resumes. Each run takes about (members + 1) x limit x 0.4 s at one thread
on a 2-core CPU with SmolLM2-135M (24 new tokens per answer).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from evolora.evaluation.rerun import evaluate_run
from evolora.io import write_json_atomic
from evolora.report.data import load_run
from evolora.report.study_tables import select_runs
from evolora.study import parse_arms, parse_seeds


def finished_runs(study: Path, arms: list[str] | None, seeds: list[int] | None) -> list[Path]:
    """The study's finished run directories of the given arms and seeds (:func:`select_runs`)."""
    runs = [load_run(p) for p in sorted(study.iterdir()) if (p / "final" / "summary.json").is_file()]
    return [run.path for run in select_runs(runs, arms, seeds)]


def base_result(out: Path) -> tuple[str, dict] | None:
    """(record name, the base's held-out numbers) of the first record in ``out`` that evaluated it."""
    for summary_path in sorted(out.glob("*/final/summary.json")):
        summary = json.loads(summary_path.read_text())
        if "base" in summary["held_out"] and "base_from" not in summary["held_out_eval"]:
            return summary_path.parents[1].name, summary["held_out"]["base"]
    return None


def reevaluate(run: Path, out: Path, overrides: list[str], limit: int | None, known: tuple[str, dict] | None) -> dict:
    """One run's new record in ``out / run.name``; the base is evaluated only when ``known`` (the
    record that has it, and its numbers) is None, else its numbers are copied in."""
    extra = [] if known is None else ["eval.base=false"]
    held_out = evaluate_run(run, limit=limit, overrides=[*overrides, *extra], out=out / run.name)
    if known is not None:
        summary_path = out / run.name / "final" / "summary.json"
        summary = json.loads(summary_path.read_text())
        summary["held_out"]["base"] = held_out["base"] = known[1]
        summary["held_out_eval"]["base_from"] = known[0]
        write_json_atomic(summary_path, summary)
    return held_out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="KEY=VALUE, repeatable")
    parser.add_argument("--limit", type=int, help="held-out problems per member (default eval.limit)")
    parser.add_argument("--arms", help="only these arms: population,single_agent")
    parser.add_argument("--seeds", help="only these seeds: 0-9")
    args = parser.parse_args()
    runs = finished_runs(
        args.study, parse_arms(args.arms) if args.arms else None, parse_seeds(args.seeds) if args.seeds else None
    )
    todo = [run for run in runs if not (args.out / run.name / "final" / "summary.json").is_file()]
    print(f"{len(runs)} finished runs, {len(runs) - len(todo)} already re-evaluated in {args.out}", flush=True)
    known = base_result(args.out)
    for i, run in enumerate(todo, 1):
        began = time.perf_counter()
        held_out = reevaluate(run, args.out, args.overrides, args.limit, known)
        known = known or (run.name, held_out["base"])
        cells = ", ".join(f"{name} {r['accuracy']:.1%}" for name, r in held_out.items())
        print(f"[{i}/{len(todo)}] {run.name}: {cells} ({time.perf_counter() - began:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
