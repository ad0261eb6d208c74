"""Does a fitness signal predict held-out accuracy? Measured on finished runs' final students.

    python benchmarks/fitness_validity.py runs/study-dtype --size 90 --out runs/fitness-validity.json

For every finished run under the given directories (``final/summary.json`` with students), the
final solvers are evaluated greedily on the task's dev set (:meth:`evolora.tasks.base.Task.dev_set`,
``--size`` problems, disjoint from the held-out items) in one batched call, and the two signals
a fitness can use, μ − 3σ (from the summary) and dev accuracy, are set against the held-out
accuracy the run recorded. The result pools runs within-run (:func:`evolora.fitness.pooled_rank_correlation`):
Spearman's ρ of run-centred values and the count of member pairs whose order agrees.
Per-run dev accuracies are cached in the output file, so a rerun only evaluates new runs.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from evolora.evaluation.rerun import load_members
from evolora.fitness import dev_accuracy, pooled_rank_correlation
from evolora.game import MEMBER_ROLES
from evolora.io import write_json_atomic


def finished_runs(roots: list[Path]) -> list[Path]:
    """Run directories with a final summary, in name order (a root may itself be a run)."""
    runs = []
    for root in roots:
        candidates = [root] if (root / "final" / "summary.json").is_file() else sorted(root.iterdir())
        runs += [p for p in candidates if (p / "final" / "summary.json").is_file()]
    return runs


def measure(run_dir: Path, size: int) -> dict:
    """{"dev": {id: accuracy}, "rating": {id: μ − 3σ}, "held_out": {id: accuracy}, "seconds"} of one run."""
    summary = json.loads((run_dir / "final" / "summary.json").read_text())
    members = [i for i in summary["individuals"] if i["role"] in MEMBER_ROLES and i.get("held_out")]
    config, task, tokenizer, bank = load_members(run_dir, [i["id"] for i in members], num_threads=1)
    began = time.perf_counter()
    dev = dev_accuracy(
        bank,
        tokenizer,
        task,
        {i["id"]: i["id"] for i in members},
        task.dev_set(size),
        max_new_tokens=config.eval.max_new_tokens,
        batch_size=config.eval.batch_size,
    )
    task.close()
    return {
        "dev": dev,
        "rating": {i["id"]: i["conservative"] for i in members},
        "held_out": {i["id"]: i["held_out"]["accuracy"] for i in members},
        "seconds": round(time.perf_counter() - began, 1),
        "size": size,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path, help="study or run directories")
    parser.add_argument("--size", type=int, default=90, help="dev problems per student (default 90)")
    parser.add_argument("--out", type=Path, required=True, help="JSON file of the per-run measures and the result")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    result = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": {}}
    for run_dir in finished_runs(args.roots):
        key = str(run_dir)
        if key in result["runs"] and result["runs"][key]["size"] == args.size:
            continue
        result["runs"][key] = measure(run_dir, args.size)
        write_json_atomic(args.out, result)  # each run kept as soon as it is measured
        print(
            f"{run_dir.name}: dev {result['runs'][key]['dev']} held-out {result['runs'][key]['held_out']}", flush=True
        )
    runs = list(result["runs"].values())
    result["pooled"] = {
        signal: pooled_rank_correlation([(r[signal], r["held_out"]) for r in runs]) for signal in ("rating", "dev")
    }
    write_json_atomic(args.out, result)
    print(json.dumps(result["pooled"], indent=1))
    return result


if __name__ == "__main__":
    main()
