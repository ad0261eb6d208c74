"""Print a study's pre-stated reading (Markdown) from the unrounded ``stats.json`` that
``benchmarks/study_report.py`` writes: the verdict on one paired comparison and each target of
whether selection acted, with its value, threshold and whether it is met.

    python benchmarks/study_reading.py analysis/primary/stats.json --arm population
    python benchmarks/study_reading.py analysis/secondary/stats.json \
        --comparison "population − single_agent_total" --arm population

The rule is :mod:`evolora.report.study_reading` (docs/results/evolution.md, "Endpoints").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from evolora.report.study_reading import render_reading, study_reading


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stats", type=Path, help="OUT/stats.json of study_report.py")
    parser.add_argument("--comparison", help='"reference − arm" (default: the first in stats.json)')
    parser.add_argument("--arm", default="population", help="the arm whose selection targets are read")
    args = parser.parse_args()
    stats = json.loads(args.stats.read_text())
    if not stats.get("comparisons"):
        sys.exit(f"{args.stats}: no paired comparison (one arm only?)")
    comparison = args.comparison or stats["comparisons"][0]["comparison"]
    try:
        print(render_reading(study_reading(stats, comparison, arm=args.arm)), end="")
    except KeyError as error:
        sys.exit(str(error.args[0]))


if __name__ == "__main__":
    main()
