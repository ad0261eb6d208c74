"""The comparison tables of a study: each arm's held-out accuracy, and each arm against the
population paired by seed (t interval and exact sign-flip p), as Markdown, plus the figure.

    tables = study_tables(runs)           # runs: loaded run directories of one study
    Path("study.md").write_text(tables.markdown)
    # figures: evolora.report.study_figures

Unfinished runs are left out and every n is printed. Source: PopuLoRA (arXiv 2605.16727) §4.
"""

from __future__ import annotations

from dataclasses import dataclass

from evolora.report.data import RunData, held_out_groups, held_out_members, run_numbers, t_interval, trend_metric
from evolora.report.stats import paired_difference

REFERENCE = "population"
"""The arm every other arm is compared with."""


@dataclass
class StudyTables:
    """Per arm: {seed: numbers of :func:`evolora.report.data.run_numbers`}; and the Markdown."""

    by_arm: dict[str, dict[int, dict]]
    markdown: str


def select_runs(runs: list[RunData], arms: list[str] | None = None,
                seeds: list[int] | None = None) -> list[RunData]:
    """The runs of the given arms and seeds, arms in the order given (all of them when ``None``).

    One study directory can hold several questions (the study's arms and a selection sweep); this
    picks the runs of one, e.g. ``arms=["population", "truncation"], seeds=[0, 1, 2, 3]``.
    """
    picked = [run for run in runs if (arms is None or run.mode in arms) and (seeds is None or run.seed in seeds)]
    if arms is not None:
        picked.sort(key=lambda run: arms.index(run.mode))
    return picked


def study_tables(runs: list[RunData]) -> StudyTables:
    """Build the tables from the finished runs among ``runs`` (arms in order of appearance)."""
    finished = [run for run in runs if run.summary is not None and held_out_members(run)]
    metric = trend_metric(finished) if finished else None
    by_arm: dict[str, dict[int, dict]] = {}
    for run in finished:
        by_arm.setdefault(run.mode, {})[run.seed] = run_numbers(run, metric)
    sections = [_arm_table(by_arm), _paired_table(by_arm), _seed_table(by_arm), _pass_table(finished),
                _cell_table(held_out_groups(finished))]
    return StudyTables(by_arm, "\n\n".join("\n".join(lines) for lines in sections if lines))


def _pass_table(runs: list[RunData]) -> list[str]:
    """Sampled pass@k per arm (runs evaluated with ``evolora evaluate --samples``): the base, the
    member mean and the best member, each averaged over the arm's seeds; empty when no run has it."""
    rows: dict[str, list[dict]] = {}
    for run in runs:
        record = run.summary.get("pass_at_k")
        if record:
            rows.setdefault(run.mode, []).append(record)
    if not rows:
        return []
    lines = ["| arm | seeds | samples | k | base, % | member mean, % | best member, % |", "|---|---|---|---|---|---|---|"]
    for arm, records in rows.items():
        ks = sorted({key for r in records for key in r["members"]["base"] if key.startswith("pass@")},
                    key=lambda key: int(key[5:]))
        for key in ks:
            base = [r["members"]["base"][key] for r in records]
            members = [[v[key] for m, v in r["members"].items() if m != "base"] for r in records]
            mean = [sum(m) / len(m) for m in members if m]
            best = [max(m) for m in members if m]
            cells = [f"{100 * sum(v) / len(v):.1f}" if v else "–" for v in (base, mean, best)]
            lines.append(f"| {arm} | {len(records)} | {records[0]['samples']} | {key[5:]} | {' | '.join(cells)} |")
    return lines


def _pct(stat: dict, key: str = "mean") -> str:
    value = stat[key]
    if value is None:
        return "–"
    if stat.get("low") is None:
        return f"{100 * value:+.1f}" if key == "diff" else f"{100 * value:.1f}"
    return f"{100 * value:.1f} [{100 * stat['low']:.1f}, {100 * stat['high']:.1f}]"


def _arm_table(by_arm: dict[str, dict[int, dict]]) -> list[str]:
    lines = ["| arm | n | member mean, % [95 % t] | best member, % | base, % | complexity slope per step [95 % t] |",
             "|---|---|---|---|---|---|"]
    for arm, seeds in by_arm.items():
        numbers = list(seeds.values())
        cells = [_pct(t_interval([n[k] for n in numbers])) for k in ("mean", "best", "base")]
        slope = t_interval([n["complexity_slope"] for n in numbers])
        shown = "–" if slope["mean"] is None else (f"{slope['mean']:+.4f}" if slope["low"] is None else
                                                    f"{slope['mean']:+.4f} [{slope['low']:+.4f}, {slope['high']:+.4f}]")
        lines.append(f"| {arm} | {len(numbers)} | {' | '.join(cells)} | {shown} |")
    return lines


def _paired_table(by_arm: dict[str, dict[int, dict]]) -> list[str]:
    lines = ["| comparison | seeds | member mean, points [95 % t] | exact sign-flip p | best member, points |",
             "|---|---|---|---|---|"]
    reference = by_arm.get(REFERENCE, {})
    for arm, seeds in by_arm.items():
        if arm == REFERENCE:
            continue
        common = sorted(set(seeds) & set(reference))
        if not common:
            lines.append(f"| {REFERENCE} − {arm} | none in common | – | – | – |")
            continue
        mean = paired_difference([reference[s]["mean"] for s in common], [seeds[s]["mean"] for s in common])
        best = paired_difference([reference[s]["best"] for s in common], [seeds[s]["best"] for s in common])
        lines.append(f"| {REFERENCE} − {arm} | {', '.join(map(str, common))} (n = {len(common)}) | "
                     f"{_points(mean)} | {mean['p']:.3f} | {_points(best)} |")
    return lines


def _points(stat: dict) -> str:
    if stat["mean"] is None:
        return "–"
    if stat["low"] is None:
        return f"{100 * stat['mean']:+.1f}"
    return f"{100 * stat['mean']:+.1f} [{100 * stat['low']:+.1f}, {100 * stat['high']:+.1f}]"


def _seed_table(by_arm: dict[str, dict[int, dict]]) -> list[str]:
    seeds = sorted({s for arm in by_arm.values() for s in arm})
    lines = ["| seed | " + " | ".join(by_arm) + " |", "|---|" + "---|" * len(by_arm)]
    for seed in seeds:
        cells = [f"{100 * by_arm[a][seed]['mean']:.1f}" if seed in by_arm[a] else "–" for a in by_arm]
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    return lines


def _cell_table(groups: dict[str, dict[str, float]]) -> list[str]:
    """Held-out accuracy per cell (arith: ``d<digits>o<operators>``), base and each arm's best member."""
    if not groups:
        return []
    cells = sorted({cell for values in groups.values() for cell in values})
    lines = ["| cell | " + " | ".join(groups) + " |", "|---|" + "---|" * len(groups)]
    for cell in cells:
        lines.append(f"| {cell} | " + " | ".join(f"{100 * groups[k][cell]:.0f}" if cell in groups[k] else "–"
                                                  for k in groups) + " |")
    return lines
