"""Students' solve rate per seed template of gsm `numbers` proposals, read from run records.

Each proposal of the `numbers` mode fills in the numbers of one seed problem; its first line
(`Problem: ... {a} ... {b} ...`) names the template. For the first ``--steps`` steps of every run
directory given (its ``matches.jsonl``), this prints per template: proposals, valid ones, correct
attempts of the valid ones, and learnable problems (solved by some but not all attempts), most
solved first, and a last line with the totals. No model is loaded.

    python benchmarks/gsm_templates.py docs/results/data/gsm-float32-seeds/gsm4-s1{0,1,2} --steps 4
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def template_table(runs: list[Path], steps: int) -> dict[str, dict[str, int]]:
    """{template line: {"proposals", "valid", "attempts", "correct", "learnable"}} over the runs' first ``steps`` steps."""
    table: dict[str, dict[str, int]] = defaultdict(
        lambda: dict.fromkeys(("proposals", "valid", "attempts", "correct", "learnable"), 0)
    )
    for run in runs:
        for line in (run / "matches.jsonl").read_text().splitlines():
            match = json.loads(line)
            if match["step"] > steps:
                continue
            row = table[match["proposal_text"].split("\n")[0]]
            row["proposals"] += 1
            if match["valid"]:
                correct = sum(grade == "correct" for grade in match["grades"])
                row["valid"] += 1
                row["attempts"] += len(match["grades"])
                row["correct"] += correct
                row["learnable"] += 0 < correct < len(match["grades"])
    return dict(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="run directories with matches.jsonl")
    parser.add_argument("--steps", type=int, default=4, help="the first N steps of each run")
    args = parser.parse_args()
    table = template_table(args.runs, args.steps)
    rate = lambda row: row["correct"] / row["attempts"] if row["attempts"] else 0.0  # noqa: E731
    for template, row in sorted(table.items(), key=lambda item: -rate(item[1])):
        print(
            f"{row['proposals']:4d} proposals {row['valid']:4d} valid {row['correct']:4d}/{row['attempts']:<4d} "
            f"solved ({rate(row):.2f}) {row['learnable']:3d} learnable  {template[:100]}"
        )
    totals = {
        key: sum(row[key] for row in table.values())
        for key in ("proposals", "valid", "attempts", "correct", "learnable")
    }
    print(
        f"all {len(table)} templates: {totals['proposals']} proposals, {totals['valid']} valid, "
        f"{totals['correct']}/{totals['attempts']} attempts solved, {totals['learnable']} learnable"
    )


if __name__ == "__main__":
    main()
