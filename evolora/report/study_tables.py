"""The comparison tables of a study: each arm's held-out accuracy, and each arm against a
reference arm (the population unless told) paired by seed (t interval and exact sign-flip p), as Markdown, plus the figure.

    tables = study_tables(runs)           # runs: loaded run directories of one study
    tables = study_tables(runs, reference="size4")   # each arm against size4
    Path("study.md").write_text(tables.markdown)
    # figures: evolora.report.study_figures

Unfinished runs are left out and every n is printed. Source: PopuLoRA (arXiv 2605.16727) §4.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from evolora.report.data import RunData, held_out_groups, held_out_members, run_numbers, t_interval, trend_metric
from evolora.report.selection_tables import birth_table, events_table, fitness_table, per_event_table
from evolora.report.study_stats import paired_comparisons

REFERENCE = "population"
"""The arm every other arm is compared with, unless :func:`study_tables` is given another."""


@dataclass
class StudyTables:
    """The numbers of a study's finished runs, per arm and seed, and the Markdown tables.

    Attributes:
        by_arm: {arm: {seed: numbers}}. Each seed's numbers are those of
            :func:`evolora.report.data.run_numbers` (held-out ``mean``, ``best`` and ``base``
            accuracy as fractions in [0, 1], None when not evaluated; complexity slope, validity,
            solve rate …), ``items`` (:func:`member_items`: an (N,) array in [0, 1], or None), and
            :func:`compute_numbers` (``rollouts``, ``trained``, ``tokens``: counts summed over the
            steps; ``wall``: seconds; each None when the records lack it).
        markdown: the tables (accuracies in %, differences in percentage points), blank-line separated.
    """

    by_arm: dict[str, dict[int, dict]]
    markdown: str


def select_runs(runs: list[RunData], arms: list[str] | None = None, seeds: list[int] | None = None) -> list[RunData]:
    """The runs of the given arms and seeds, arms in the order given (all of them when ``None``).

    One study directory can hold several questions (the study's arms and a selection sweep); this
    picks the runs of one, e.g. ``arms=["population", "truncation"], seeds=[0, 1, 2, 3]``.

    Args:
        runs: loaded runs (:func:`evolora.report.data.load_run`).
        arms: arm names, matched against :attr:`RunData.mode` (``study.arm`` when the run has one,
            else ``selfplay.mode``); None: every arm, in the order of ``runs``.
        seeds: ``run.seed`` values to keep; None: every seed.

    Returns:
        The matching runs, grouped by arm in the order of ``arms`` (stable within an arm).
    """
    picked = [run for run in runs if (arms is None or run.mode in arms) and (seeds is None or run.seed in seeds)]
    if arms is not None:
        picked.sort(key=lambda run: arms.index(run.mode))
    return picked


def study_tables(runs: list[RunData], reference: str = REFERENCE) -> StudyTables:
    """Build the tables from the finished runs among ``runs`` (arms in order of appearance).

    A run is finished when it has a summary with held-out accuracy for at least one member;
    the others are left out.

    Args:
        runs: loaded runs of one study (:func:`evolora.report.data.load_run`).
        reference: the arm each other arm is compared with, paired by seed (``reference − arm``).
            An arm sharing no seed with it, or a reference that is not among the runs, gives a
            "none in common" row.

    Returns:
        :class:`StudyTables`: ``by_arm`` holds fractions in [0, 1]; the Markdown shows accuracies
        in % and differences in percentage points, with every n.
    """
    finished = [run for run in runs if run.summary is not None and held_out_members(run)]
    metric = trend_metric(finished) if finished else None
    by_arm: dict[str, dict[int, dict]] = {}
    for run in finished:
        by_arm.setdefault(run.mode, {})[run.seed] = {
            **run_numbers(run, metric),
            "items": member_items(run),
            **compute_numbers(run),
        }
    sections = [
        _arm_table(by_arm),
        _paired_table(by_arm, reference),
        _compute_table(by_arm),
        _seed_table(by_arm),
        fitness_table(finished),
        birth_table(finished),
        events_table(finished),
        per_event_table(finished),
        _pass_table(finished),
        _cell_table(held_out_groups(finished)),
    ]
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
    lines = [
        "| arm | seeds | samples | k | base, % | member mean, % | best member, % |",
        "|---|---|---|---|---|---|---|",
    ]
    for arm, records in rows.items():
        ks = sorted(
            {key for r in records for key in r["members"]["base"] if key.startswith("pass@")},
            key=lambda key: int(key[5:]),
        )
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
    lines = [
        "| arm | n | member mean, % [95 % t] | best member, % | base, % | complexity slope per step [95 % t] |",
        "|---|---|---|---|---|---|",
    ]
    for arm, seeds in by_arm.items():
        numbers = list(seeds.values())
        cells = [_pct(t_interval([n[k] for n in numbers])) for k in ("mean", "best", "base")]
        slope = t_interval([n["complexity_slope"] for n in numbers])
        shown = (
            "–"
            if slope["mean"] is None
            else (
                f"{slope['mean']:+.4f}"
                if slope["low"] is None
                else f"{slope['mean']:+.4f} [{slope['low']:+.4f}, {slope['high']:+.4f}]"
            )
        )
        lines.append(f"| {arm} | {len(numbers)} | {' | '.join(cells)} | {shown} |")
    return lines


def _paired_table(by_arm: dict[str, dict[int, dict]], name: str) -> list[str]:
    lines = [
        "| comparison | seeds | member mean, points [95 % t] | exact sign-flip p | best member (chosen on the "
        "test set), points | member mean, points [95 % item × seed bootstrap] |",
        "|---|---|---|---|---|---|",
    ]
    for row in paired_comparisons(by_arm, name):
        if not row["seeds"]:
            lines.append(f"| {row['comparison']} | none in common | – | – | – | – |")
            continue
        crossed = "–" if row["bootstrap"] is None else _points(row["bootstrap"])
        lines.append(
            f"| {row['comparison']} | {', '.join(map(str, row['seeds']))} (n = {len(row['seeds'])}) | "
            f"{_points(row['mean'])} | {row['mean']['p']:.3f} | {_points(row['best'])} | {crossed} |"
        )
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
        lines.append(
            f"| {cell} | "
            + " | ".join(f"{100 * groups[k][cell]:.0f}" if cell in groups[k] else "–" for k in groups)
            + " |"
        )
    return lines


def member_correctness(run: RunData) -> dict[str, np.ndarray] | None:
    """Per member, its correctness on each held-out item.

    Read from the summary's per-item ``items`` strings, else from ``final/held_out.jsonl``.

    Args:
        run: a loaded run.

    Returns:
        {member: (N,) array in {0, 1}}, N the held-out items evaluated, in the held-out set's order,
        for the members of :func:`evolora.report.data.held_out_members`; None when neither source
        holds every member's answers, or members answered different numbers of items.
    """
    members = held_out_members(run)
    held = (run.summary or {}).get("held_out") or {}
    rows = {m: held[m].get("items") for m in members}
    if members and all(rows.values()):
        if len({len(r) for r in rows.values()}) != 1:
            return None
        return {m: np.array([c == "1" for c in rows[m]], dtype=float) for m in members}
    answers = run.path / "final" / "held_out.jsonl"
    if not members or not answers.is_file():
        return None
    flags: dict[str, dict[int, bool]] = {m: {} for m in members}
    for line in answers.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("member") in flags:
            flags[entry["member"]][entry["item"]] = entry["grade"] == "correct"
    sizes = {len(v) for v in flags.values()}
    if len(sizes) != 1 or 0 in sizes:
        return None
    return {m: np.array([v[i] for i in sorted(v)], dtype=float) for m, v in flags.items()}


def member_items(run: RunData) -> np.ndarray | None:
    """Per held-out item, the mean over the run's members of their correctness
    (:func:`member_correctness`): an (N,) array in [0, 1], or None where that is None."""
    rows = member_correctness(run)
    return None if rows is None else np.stack(list(rows.values())).mean(axis=0)


def compute_numbers(run: RunData) -> dict:
    """What a run spent, summed over its steps: rollouts (completions sampled), trained samples
    (samples that carried gradient), rollout tokens and wall seconds; None where the records lack a key."""

    def total(get):
        values = [get(record) for record in run.metrics]
        return float(sum(values)) if values and all(v is not None for v in values) else None

    return {
        "rollouts": total(lambda r: r.get("rollouts")),
        "trained": total(lambda r: sum(r["trained_samples"].values()) if "trained_samples" in r else None),
        "tokens": total(lambda r: r.get("tokens")),
        "wall": total(lambda r: (r.get("seconds") or {}).get("total")),
    }


def _compute_table(by_arm: dict[str, dict[int, dict]]) -> list[str]:
    """Compute per run, mean over each arm's seeds: is a comparison matched?"""
    lines = [
        "| arm | n | rollouts per run | trained samples per run | rollout tokens per run | wall minutes per run |",
        "|---|---|---|---|---|---|",
    ]
    for arm, seeds in by_arm.items():
        cells = []
        for key, scale in (("rollouts", 1), ("trained", 1), ("tokens", 1), ("wall", 60)):
            values = [n[key] for n in seeds.values() if n.get(key) is not None]
            cells.append(f"{sum(values) / len(values) / scale:,.0f}" if values else "–")
        lines.append(f"| {arm} | {len(seeds)} | {' | '.join(cells)} |")
    return lines
