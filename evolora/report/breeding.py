"""The breeder's table of runs: at every evolution event, the selection differential S of a role,
and at the next event the response R and realized heritability h² = R / S (:mod:`evolora.breeding`).

    rows  = breeders_rows(runs)            # one row per (run, event, role)
    table = breeders_summary(rows)         # per signal: events, share with S > 0, mean S and R, pooled h²
    plot_breeding(runs, "breeding.png")    # S and R per event, one line per run

Source: Falconer & Mackay (1996) ch. 11 (R = h² S).
"""

from __future__ import annotations

import math
from pathlib import Path

from evolora.report.data import RunData
from evolora.report.plots import _figure, _save

POSITIVE = 1e-9
"""S counts as positive above this (in the signal's units, fractions for accuracies): a difference of
means of 68ths in float64 is not exactly 0 when it should be, so a tie never counts as positive."""

SIGNALS = ("fitness", "accuracy", "logprob", "held_out", "rating")
"""The signals of the table, where a run recorded them (the exam's, the audit's, the rating)."""


def breeders_rows(runs: list[RunData], role: str = "student") -> list[dict]:
    """One row per event of every run with ``role`` births: {"run", "seed", "mode", "step", "S": {signal: S},
    "R": {signal: R} (the next event's response; {} when none came), "h2": {signal: R / S}}."""
    rows = []
    for run in runs:
        responses = {}
        for record in run.metrics:
            response = (record.get("evolution") or {}).get("response")
            if response and role in response:
                responses[response["of_step"]] = response[role]
        for record in run.metrics:
            selection = (record.get("evolution") or {}).get("selection", {}).get(role)
            if selection is None:
                continue
            later = responses.get(record["step"], {})
            rows.append(
                {
                    "run": str(run.path),
                    "seed": run.seed,
                    "mode": run.mode,
                    "step": record["step"],
                    "S": selection["differential"],
                    "R": later.get("response", {}),
                    "h2": later.get("heritability", {}),
                }
            )
    return rows


def breeders_summary(rows: list[dict]) -> dict[str, dict]:
    """Per signal: {"events": events with S, "positive": share of them with S > :data:`POSITIVE`,
    "S": mean S, "R": mean R over events with a response, "h2": ΣR / ΣS over those events (None
    when ΣS = 0 or none)}."""
    table = {}
    for signal in SIGNALS:
        s = [row["S"][signal] for row in rows if _finite(row["S"].get(signal))]
        pairs = [
            (row["S"][signal], row["R"][signal])
            for row in rows
            if _finite(row["S"].get(signal)) and _finite(row["R"].get(signal))
        ]
        if not s:
            continue
        total_s = sum(p[0] for p in pairs)
        table[signal] = {
            "events": len(s),
            "positive": sum(v > POSITIVE for v in s) / len(s),
            "S": sum(s) / len(s),
            "R": sum(p[1] for p in pairs) / len(pairs) if pairs else None,
            "h2": sum(p[1] for p in pairs) / total_s if pairs and total_s else None,
        }
    return table


def plot_breeding(runs: list[RunData], path: Path) -> Path | None:
    """S (left) and R (right) of the students per event for the exam fitness and audited held-out
    accuracy, one line per run; None when no run recorded an event."""
    rows = breeders_rows(runs)
    signals = [s for s in ("fitness", "held_out") if any(_finite(r["S"].get(s)) for r in rows)]
    if not signals:
        return None
    fig = _figure((10.0, 3.4))
    axes = fig.subplots(1, 2)
    for ax, key, title in zip(axes, ("S", "R"), ("selection differential S", "response R (next event)")):
        for signal, style in zip(signals, ("-", "--")):
            for run in dict.fromkeys(r["run"] for r in rows):
                points = [(r["step"], r[key][signal]) for r in rows if r["run"] == run and _finite(r[key].get(signal))]
                if points:
                    ax.plot(
                        *zip(*points),
                        linestyle=style,
                        marker=".",
                        linewidth=1.0,
                        alpha=0.8,
                        label=signal if run == rows[0]["run"] else None,
                    )
        ax.axhline(0.0, color="gray", linewidth=0.8)
        ax.set_title(title)
        ax.set_xlabel("event step")
        ax.set_ylabel("deviation from the role mean")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    return _save(fig, path)


def _finite(value) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


FIGURE = (
    "breeding",
    plot_breeding,
    "The breeder's equation of the students at every evolution event: "
    "selection differential S (the chosen parents' mean deviation from the role mean) and, at the next "
    "event, the response R of their children; solid: the fitness, dashed: audited held-out accuracy. "
    "Drawn when a run recorded events (evolora.breeding).",
)
"""(name, function, caption) of the report's breeder's figure (:data:`evolora.report.plots.FIGURES` order: last)."""
