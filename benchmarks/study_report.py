"""Write a study's comparison tables (Markdown) and figure from its run directories.

    python benchmarks/study_report.py runs/study-arith --out docs/results/study
    python benchmarks/study_report.py runs/study-arith --out sweep \
        --arms population,truncation,rank_selection,fitness_proportional --seeds 0-3
    python benchmarks/study_report.py runs/study-popsize --out evolution \
        --arms size4,size4_noevo --reference size4
    python benchmarks/study_report.py runs/study-evolution --out evolution \
        --arms population,no_evolution --seeds 0-7 --reference population

Beside the held-out comparison, the tables say whether selection acted
(:mod:`evolora.report.selection_tables`): fitness validity, ρ(fitness, birth step) and the events.
``OUT/stats.json`` holds the same numbers unrounded, and which runs were finished
(:func:`evolora.report.study_stats.study_stats`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from evolora.report.data import load_run
from evolora.report.study_figures import write_study_report
from evolora.report.study_stats import study_stats
from evolora.report.study_tables import select_runs, study_tables
from evolora.study import parse_arms, parse_seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study")
    parser.add_argument("--out", required=True)
    parser.add_argument("--arms", help="only these arms, in this order: population,single_agent")
    parser.add_argument("--seeds", help="only these seeds: 0-3 or 0,1,2")
    parser.add_argument(
        "--reference",
        default="population",
        help="the arm each other arm is compared with (reference - arm; default population)",
    )
    args = parser.parse_args()
    runs = [load_run(p) for p in sorted(Path(args.study).iterdir()) if (p / "config.yaml").is_file()]
    runs = select_runs(
        runs, parse_arms(args.arms) if args.arms else None, parse_seeds(args.seeds) if args.seeds else None
    )
    tables = study_tables(runs, reference=args.reference)
    write_study_report(tables, runs, args.out)
    stats = study_stats(runs, tables.by_arm, args.reference)
    (Path(args.out) / "stats.json").write_text(json.dumps(stats, indent=1, default=_plain) + "\n")
    print(tables.markdown)


def _plain(value):
    """numpy scalars as Python numbers for JSON."""
    return value.item() if hasattr(value, "item") else str(value)


if __name__ == "__main__":
    main()
