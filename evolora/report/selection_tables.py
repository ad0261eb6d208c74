"""Did selection act? A study's tables of its final fitness and its evolution events, per arm.

    fitness_table(runs)   # within-run Spearman ρ of each final fitness signal with held-out accuracy
    birth_table(runs)     # within-run ρ of the final fitness with the birth step, per role
    events_table(runs)    # events per run, the share of each role replaced, the students' S, R and h²
    per_event_table(runs) # the breeder's table per event step: S > 0 count, mean S, R and h² over the runs

They test the targets of an outer loop that acts (``docs/results/evolution.md``): the fitness
tracks held-out accuracy within a run (ρ ≥ 0.5 pooled over the evolution-on runs), it does not
rank by age (|ρ(fitness, birth step)| ≤ 0.2), every run has ≥ 9 events each replacing ≥ half of
each role, and the selection differential on audited held-out accuracy is positive at ≥ 70 % of
events. Each table is empty (no lines) when no run recorded what it reads.

Source: PopuLoRA (arXiv 2605.16727) §2 step 5 (evolution); the breeder's equation of
:mod:`evolora.breeding`.
"""

from __future__ import annotations

from evolora.fitness import pooled_rank_correlation
from evolora.report.breeding import breeders_rows, breeders_summary
from evolora.report.data import RunData, held_out_members
from evolora.report.stats import fixed

SIGNAL_LABELS = {
    "fitness": "fitness (selected on)",
    "accuracy": "exam accuracy",
    "logprob": "exam log-probability",
    "validation": "dev accuracy",
    "rating": "μ − 3σ",
}
"""The final fitness signals the validity table reads from ``summary.fitness.members``, in order."""

PLAIN_FITNESS = ("rating", "validation")
"""Fitness names whose ``fitness`` value repeats a signal of its own row (then left out)."""

BREEDING_SIGNALS = {"fitness": "fitness (selected on)", "held_out": "audited held-out accuracy"}
"""The students' breeder's signals of the events table."""


def _fitness(run: RunData) -> dict:
    """``summary.fitness`` of a finished run ({} when it recorded none): its ``name`` and ``members``."""
    return (run.summary or {}).get("fitness") or {}


def _members(run: RunData) -> dict[str, dict]:
    return _fitness(run).get("members") or {}


def _rho(pooled: dict) -> str:
    return "–" if pooled["rho"] is None else _signed(pooled["rho"])


def _signed(value: float) -> str:
    return fixed(value, 2, signed=True)


def _x100(value: float | None) -> str:
    return "–" if value is None else _signed(100 * value)


def _breeding_cells(row: dict) -> tuple[str, str, str, str]:
    """("k of n" events with S > 0, S × 100, R × 100, h²) of one signal's
    :func:`~evolora.report.breeding.breeders_summary` row ("–" where R or h² is None)."""
    positive = round(row["positive"] * row["events"])
    h2 = "–" if row["h2"] is None else _signed(row["h2"])
    return f"{positive} of {row['events']}", _x100(row["S"]), _x100(row["R"]), h2


def _pairs_cell(pooled: dict) -> str:
    return f"{pooled['concordant']} / {pooled['discordant']} / {pooled['tied']}"


def fitness_correlations(runs: list[RunData]) -> dict[str, dict[str, dict]]:
    """{arm: {signal: :func:`evolora.fitness.pooled_rank_correlation` of the final members' signal
    against their held-out accuracy, with "runs"}}: what :func:`fitness_table` shows, unrounded."""
    by_arm: dict[str, dict[str, list]] = {}
    for run in runs:
        members, accuracy = _members(run), held_out_members(run)
        name = _fitness(run).get("name")
        for signal in SIGNAL_LABELS:
            if signal == "fitness" and name in PLAIN_FITNESS:
                continue
            values = {m: e.get(signal) for m, e in members.items() if m in accuracy and e.get(signal) is not None}
            if values:
                by_arm.setdefault(run.mode, {}).setdefault(signal, []).append((values, accuracy))
    return {
        arm: {
            s: {**pooled_rank_correlation(signals[s]), "runs": len(signals[s])} for s in SIGNAL_LABELS if s in signals
        }
        for arm, signals in by_arm.items()
    }


def fitness_table(runs: list[RunData]) -> list[str]:
    """Per arm and signal: Spearman's ρ of run-centred final signal against held-out accuracy over the
    arm's evaluated members and seeds, and the member pairs ordered alike / unlike / tied
    (:func:`evolora.fitness.pooled_rank_correlation`). The ``fitness`` row is the signal selection
    used (an exam's score), left out where it only repeats μ − 3σ or dev accuracy."""
    correlations = fitness_correlations(runs)
    if not correlations:
        return []
    lines = [
        "| arm | fitness signal | runs | members | within-run Spearman ρ | pairs alike / unlike / tied |",
        "|---|---|---|---|---|---|",
    ]
    for arm, signals in correlations.items():
        for signal, pooled in signals.items():
            lines.append(
                f"| {arm} | {SIGNAL_LABELS[signal]} | {pooled['runs']} | {pooled['members']} | "
                f"{_rho(pooled)} | {_pairs_cell(pooled)} |"
            )
    return lines


def birth_correlations(runs: list[RunData]) -> dict[tuple[str, str], dict]:
    """{(arm, role): :func:`evolora.fitness.pooled_rank_correlation` of the final members' ``fitness``
    against their birth step, with "runs"}: what :func:`birth_table` shows, unrounded."""
    by_key: dict[tuple[str, str], list] = {}
    for run in runs:
        members = _members(run)
        born = {i["id"]: i.get("born_step") or 0 for i in (run.summary or {}).get("individuals", [])}
        for role in dict.fromkeys(e.get("role") for e in members.values()):
            fitness = {m: e.get("fitness") for m, e in members.items() if e.get("role") == role and m in born}
            if any(v is not None for v in fitness.values()):
                by_key.setdefault((run.mode, role), []).append((fitness, {m: born[m] for m in fitness}))
    return {key: {**pooled_rank_correlation(pairs), "runs": len(pairs)} for key, pairs in by_key.items()}


def birth_table(runs: list[RunData]) -> list[str]:
    """Per arm and role: within-run Spearman ρ of the final ``fitness`` against the birth step
    (founders at step 0), pooled over seeds, and the member pairs ordered alike / unlike / tied.
    A positive ρ: the members born last rank highest."""
    correlations = birth_correlations(runs)
    if not correlations:
        return []
    lines = [
        "| arm | role | runs | members | within-run ρ(fitness, birth step) | pairs alike / unlike / tied |",
        "|---|---|---|---|---|---|",
    ]
    for (arm, role), pooled in correlations.items():
        lines.append(
            f"| {arm} | {role} | {pooled['runs']} | {pooled['members']} | {_rho(pooled)} | {_pairs_cell(pooled)} |"
        )
    return lines


def event_counts(run: RunData) -> tuple[int, float | None]:
    """(events with a selection record, the least share of a role replaced at any of them; None
    without events). Shares are ``len(replaced) / len(members)`` of each role's selection record."""
    shares = []
    events = 0
    for record in run.metrics:
        selection = (record.get("evolution") or {}).get("selection") or {}
        if selection:
            events += 1
            shares += [len(s["replaced"]) / len(s["members"]) for s in selection.values() if s.get("members")]
    return events, (min(shares) if shares else None)


def event_summaries(runs: list[RunData]) -> dict[str, dict]:
    """{arm with events: {"per_run": {seed: events}, "least_share": the least share of a role replaced
    at an event (None without shares), "breeding": :func:`~evolora.report.breeding.breeders_summary`
    of the arm's students}}: what :func:`events_table` shows, unrounded."""
    summaries = {}
    for arm in dict.fromkeys(run.mode for run in runs):
        mine = [run for run in runs if run.mode == arm]
        counts = [event_counts(run) for run in mine]
        if not any(events for events, _ in counts):
            continue
        shares = [s for _, s in counts if s is not None]
        summaries[arm] = {
            "per_run": {run.seed: events for run, (events, _) in zip(mine, counts)},
            "least_share": min(shares) if shares else None,
            "breeding": breeders_summary(breeders_rows(mine)),
        }
    return summaries


def events_table(runs: list[RunData]) -> list[str]:
    """Per arm with events: runs, events per run (fewest–most), the least share of a role replaced at
    an event, and per students' signal (:data:`BREEDING_SIGNALS`) the events with S > 0, mean S and R
    × 100 (points of accuracy for an accuracy signal), and the pooled h² = ΣR / ΣS
    (:func:`evolora.report.breeding.breeders_summary`)."""
    lines = []
    for arm, summary in event_summaries(runs).items():
        events = list(summary["per_run"].values())
        least = "–" if summary["least_share"] is None else f"{summary['least_share']:.2f}"
        for signal, label in BREEDING_SIGNALS.items():
            row = summary["breeding"].get(signal)
            if row is None:
                continue
            positive, s, r, h2 = _breeding_cells(row)
            lines.append(
                f"| {arm} | {len(events)} | {min(events)}–{max(events)} | {least} | {label} | "
                f"{positive} ({100 * row['positive']:.0f} %) | {s} | {r} | {h2} |"
            )
    if not lines:
        return []
    header = [
        "| arm | runs | events per run | least share replaced | students' signal | events with S > 0 | "
        "mean S × 100 | mean R × 100 | h² = ΣR / ΣS |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    return header + lines


def per_event_table(runs: list[RunData]) -> list[str]:
    """Per arm and event step: the runs with a students' selection record there, and for each signal
    of :data:`BREEDING_SIGNALS` the runs with S > 0, the mean S and R × 100 over the runs (R: those
    with a next event) and h² = ΣR / ΣS (:func:`evolora.report.breeding.breeders_summary` of the event)."""
    rows = breeders_rows(runs)
    if not rows:
        return []
    header = "| arm | step | runs | " + " | ".join(
        f"{label}: S > 0, mean S, mean R, h²" for label in BREEDING_SIGNALS.values()
    )
    lines = [header + " |", "|---|---|---|" + "---|" * len(BREEDING_SIGNALS)]
    for arm, step in dict.fromkeys((row["mode"], row["step"]) for row in rows):
        mine = [row for row in rows if row["mode"] == arm and row["step"] == step]
        table = breeders_summary(mine)
        cells = [", ".join(_breeding_cells(table[signal])) if signal in table else "–" for signal in BREEDING_SIGNALS]
        lines.append(f"| {arm} | {step} | {len(mine)} | " + " | ".join(cells) + " |")
    return lines
