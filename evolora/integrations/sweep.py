"""Sweep operator settings over seeds: one run per (variant, seed), one row of outcomes per run.

    variants = selection_variants(tournament_sizes=(2, 4), pfsp_weightings=("variance", "hard"))
    rows = run_sweep("tasks/gsm.yaml", variants, seeds=[0, 1], out_dir="runs/sweep",
                     overrides=["run.steps=6", "evolution.every=2"])
    plot_sweep(rows, "solve_rate")                           # one column per variant, a dot per seed

A variant is a label and a list of ``--set`` overrides (``evolution.selection={name: truncation,
params: {fraction: 0.25}}``), so anything a config can say can be swept. Every run writes its own
run directory (``<out_dir>/<variant>/seed<k>/``, with metrics.jsonl and final/), and the sweep writes
``<out_dir>/final/summary.json`` with every row. Nothing here is specific to selection.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from evolora.callbacks import JsonlLogger
from evolora.config import load_config
from evolora.io import write_json_atomic
from evolora.run import Run

__all__ = ["OUTCOMES", "selection_variants", "run_variant", "run_sweep", "aggregate", "plot_sweep"]

OUTCOMES = ("solve_rate", "validity_rate", "held_out_accuracy", "best_student_rating", "births", "seconds")
"""Columns of a sweep row besides ``variant`` and ``seed``:
solve_rate: correct / attempts of all students over the run; validity_rate: valid / proposed problems;
held_out_accuracy: mean greedy accuracy of the final students (NaN when the task has no held-out set);
best_student_rating: the best final student's μ − 3σ; births: children born; seconds: wall time."""


def _choice(kind: str, name: str, **params) -> str:
    inner = ", ".join(f"{key}: {value!r}" for key, value in params.items())
    return f"evolution.{kind}={{name: {name}, params: {{{inner}}}}}"


def selection_variants(
    *,
    tournament_sizes: Sequence[int] = (2, 4),
    truncation_fractions: Sequence[float] = (0.25, 0.5),
    temperatures: Sequence[float] = (0.1, 1.0),
    pfsp_weightings: Sequence[str] = ("variance", "hard", "uniform"),
) -> dict[str, list[str]]:
    """Variants sweeping parent selection (tournament size, truncation fraction, Boltzmann
    temperature) and the PFSP weighting of matchmaking, one knob at a time.

    Returns:
        {label: overrides}, e.g. ``{"tournament k=2": ["evolution.selection={name: tournament, params: {k: 2}}"]}``.
        Pass an empty sequence to leave a family out.
    """
    variants = {f"tournament k={k}": [_choice("selection", "tournament", k=k)] for k in tournament_sizes}
    variants |= {f"truncation {f:g}": [_choice("selection", "truncation", fraction=f)] for f in truncation_fractions}
    variants |= {
        f"softmax T={t:g}": [_choice("selection", "fitness_proportional", temperature=t)] for t in temperatures
    }
    variants |= {f"pfsp {w}": [f"selfplay.matchmaking.weighting={w}"] for w in pfsp_weightings}
    return variants


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", label).strip("_") or "variant"


def run_variant(config_path: str | Path, overrides: Sequence[str], *, seed: int, out_dir: str | Path) -> dict:
    """Run one configuration to its end (``run.steps``) and return its outcomes (see :data:`OUTCOMES`)."""
    began = time.perf_counter()
    config = load_config(config_path, list(overrides), seed=seed)
    run = Run(config, out_dir)
    run.train([JsonlLogger()])
    summary = run.finish(evaluate=config.eval.enabled and config.eval.limit > 0)
    students = [row for row in summary["individuals"] if row["role"] == "student"]
    tally = run.tally.values()  # per individual ever: attempts/correct (students) or proposals/valid (teachers)
    accuracies = [row["held_out"]["accuracy"] for row in students if row.get("held_out")]
    return {
        "solve_rate": _ratio(sum(t.get("correct", 0) for t in tally), sum(t.get("attempts", 0) for t in tally)),
        "validity_rate": _ratio(sum(t.get("valid", 0) for t in tally), sum(t.get("proposals", 0) for t in tally)),
        "held_out_accuracy": sum(accuracies) / len(accuracies) if accuracies else math.nan,
        "best_student_rating": max(row["conservative"] for row in students) if students else math.nan,
        "births": sum(1 for entry in run.lineage if entry["step"] > 0),
        "seconds": time.perf_counter() - began,
    }


def _ratio(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else math.nan


def run_sweep(
    config_path: str | Path,
    variants: Mapping[str, Sequence[str]],
    *,
    seeds: Sequence[int],
    out_dir: str | Path,
    overrides: Sequence[str] = (),
) -> list[dict]:
    """Run every variant with every seed; write and return the rows.

    Args:
        config_path: the base YAML config (e.g. ``tasks/gsm.yaml``).
        variants: {label: overrides} (e.g. from :func:`selection_variants`), applied after ``overrides``.
        seeds: ``run.seed`` of each repetition.
        out_dir: run directories go to ``<out_dir>/<variant>/seed<k>``; rows to ``<out_dir>/final/summary.json``.
        overrides: ``--set``-style overrides shared by all runs (model, steps, sizes).

    Returns:
        One dict per run: ``variant``, ``seed`` and the :data:`OUTCOMES`.

    Raises:
        ConfigError: a variant's overrides make an invalid config (checked before any run starts).
    """
    if not variants or not seeds:
        raise ValueError("give at least one variant and one seed")
    out_dir = Path(out_dir)
    for label, extra in variants.items():  # fail fast: check every config before the first run
        load_config(config_path, [*overrides, *extra])
    rows = []
    for label, extra in variants.items():
        for seed in seeds:
            outcome = run_variant(
                config_path, [*overrides, *extra], seed=seed, out_dir=out_dir / _slug(label) / f"seed{seed}"
            )
            rows.append({"variant": label, "seed": seed, **outcome})
    write_json_atomic(
        out_dir / "final" / "summary.json",
        {
            "config": str(config_path),
            "overrides": list(overrides),
            "seeds": list(seeds),
            "variants": {k: list(v) for k, v in variants.items()},
            "rows": rows,
        },
    )
    return rows


def aggregate(rows: Sequence[dict], outcome: str) -> dict[str, tuple[float, float, int]]:
    """{variant: (mean, std, runs)} of one outcome over seeds, ignoring NaN (mean NaN when all are)."""
    table: dict[str, list[float]] = {}
    for row in rows:
        table.setdefault(row["variant"], []).append(float(row[outcome]))
    result = {}
    for variant, values in table.items():
        finite = [v for v in values if not math.isnan(v)]
        mean = sum(finite) / len(finite) if finite else math.nan
        std = (sum((v - mean) ** 2 for v in finite) / len(finite)) ** 0.5 if finite else math.nan
        result[variant] = (mean, std, len(finite))
    return result


def plot_sweep(rows: Sequence[dict], outcome: str, ax=None):
    """One column per variant: a dot per seed and the mean ± std; returns the matplotlib Axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(max(4.0, 0.8 * len({r["variant"] for r in rows})), 3))
    summary = aggregate(rows, outcome)
    labels = list(summary)
    for x, label in enumerate(labels):
        values = [float(r[outcome]) for r in rows if r["variant"] == label]
        ax.scatter([x] * len(values), values, s=14, alpha=0.6, color="tab:blue")
        mean, std, _ = summary[label]
        ax.errorbar([x + 0.15], [mean], yerr=[0 if math.isnan(std) else std], fmt="o", color="black", capsize=3)
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_ylabel(outcome.replace("_", " "))
    ax.set_title(f"{outcome.replace('_', ' ')} per variant (dots: seeds)")
    return ax
