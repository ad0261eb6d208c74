"""Learning targets of recorded runs, read from their run directories (no model is loaded).

For each run it prints: steps, wall time (sum of step seconds; the final evaluation is in the
log), validity over the last 5 steps, the share of valid problems that were learnable
(0 < ŝ < 1) over the whole run and the last 5 steps, distinct problems (normalised text) and
coverage (signatures), mean token entropy of the first and last fifth of the steps, and the
held-out accuracy of the base and of every member, and the final ΔW diversity per role; then each
evaluated member's held-out count with how it was born, and, for tasks whose held-out items
have groups (arith's grid cells ``d<digits>o<operators>``), the count per group. With several
runs it ends with the means over runs and the ratio line ``best / base`` and ``mean / base``.

    python benchmarks/learning.py runs/gsm
    python benchmarks/learning.py runs/study-arith/population-s*
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from evolora.report.data import load_run
from evolora.report.data import run_numbers as report_numbers
from evolora.tasks.base import normalise_problem


def run_numbers(run_dir: Path, last: int = 5) -> dict:
    run = load_run(run_dir)  # the report's loader; its run_numbers give held-out, coverage, entropy
    metrics, matches = run.metrics, run.matches
    if not metrics:
        raise SystemExit(f"{run_dir}: no metrics.jsonl; give a run directory")
    final_step = metrics[-1]["step"]
    tail = [m for m in metrics if m["step"] > final_step - last]
    step_of = [m["step"] for m in metrics for _ in range(sum(m["verdicts"].values()))]
    valid = [(s, g) for s, g in zip(step_of, matches) if g["valid"]]
    learnable = lambda games: (sum(0 < (g["solve_rate"] or 0) < 1 for g in games) / len(games)) if games else None  # noqa: E731
    numbers = report_numbers(run, None)
    return {
        "run": str(run_dir),
        "steps": final_step,
        "minutes": sum(m["seconds"]["total"] for m in metrics) / 60,
        "validity_last": statistics.mean(m["validity_rate"] for m in tail),
        "learnable": learnable([g for _, g in valid]),
        "learnable_last": learnable([g for s, g in valid if s > final_step - last]),
        "distinct": len({normalise_problem(g["problem"]) for _, g in valid}),
        "coverage": numbers["coverage"],
        "entropy": (None if numbers["entropy_start"] is None else (numbers["entropy_start"], numbers["entropy_end"])),
        "base": numbers["base"],
        "best": numbers["best"],
        "mean": numbers["mean"],
        "diversity": (run.summary or {}).get("diversity"),
    }


def member_lines(run_dir: Path) -> list[str]:
    """Per evaluated member (base first): correct of total and its birth; then per group, when the
    held-out items have groups. Empty for a run without a final evaluation."""
    summary = load_run(run_dir).summary or {}
    held_out = summary.get("held_out") or {}
    if not held_out:
        return []
    born = {i["id"]: f"{i['operator']}@{i['born_step']}" for i in summary.get("individuals", [])}
    names = sorted(held_out, key=lambda name: (name != "base", name))
    lines = [
        "  held-out by member: "
        + ", ".join(
            f"{name} {held_out[name]['correct']}/{held_out[name]['total']}"
            + (f" ({born[name]})" if name in born else "")
            for name in names
        )
    ]
    groups = list(dict.fromkeys(g for name in names for g in held_out[name].get("by_group", {})))
    for group in groups:
        counts = {name: held_out[name].get("by_group", {}).get(group) for name in names}
        lines.append(
            f"  {group}: " + ", ".join(f"{name} {c['correct']}/{c['total']}" for name, c in counts.items() if c)
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--last", type=int, default=5, help="steps counted as 'last' (default 5)")
    args = parser.parse_args()
    rows = [run_numbers(path, args.last) for path in args.runs]
    fmt = lambda v: "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    for row in rows:
        entropy = "-" if row["entropy"] is None else f"{row['entropy'][0]:.2f} -> {row['entropy'][1]:.2f}"
        print(
            f"{row['run']}: steps {row['steps']}, {row['minutes']:.1f} min of steps, validity last {args.last} "
            f"{fmt(row['validity_last'])}, learnable {fmt(row['learnable'])} (last {args.last}: "
            f"{fmt(row['learnable_last'])}), distinct {row['distinct']}, coverage {row['coverage']}, "
            f"entropy {entropy}, held-out base {fmt(row['base'])} best {fmt(row['best'])} mean {fmt(row['mean'])}, "
            f"ΔW diversity {row['diversity'] or '-'}"
        )
        for line in member_lines(Path(row["run"])):
            print(line)
    scored = [r for r in rows if r["base"] is not None and r["best"] is not None]
    if scored:
        mean = lambda key: statistics.mean(r[key] for r in scored)  # noqa: E731
        print(
            f"mean over {len(scored)} runs: base {mean('base'):.3f}, best {mean('best'):.3f}, member mean "
            f"{mean('mean'):.3f}; best - base {mean('best') - mean('base'):+.3f}, mean - base "
            f"{mean('mean') - mean('base'):+.3f}"
        )
        if mean("base") > 0:
            print(f"ratio best/base {mean('best') / mean('base'):.2f}, mean/base {mean('mean') / mean('base'):.2f}")


if __name__ == "__main__":
    main()
