"""Report figures: one PNG per view of one or more runs (matplotlib, Agg backend, no display).

Figures are built as ``matplotlib.figure.Figure`` on an Agg canvas, never through pyplot, so
making a report changes no global matplotlib state (a notebook's backend stays as it was).

Every ``plot_*`` function takes loaded runs (:class:`evolora.report.data.RunData`) and an
output path, writes the PNG atomically and returns its path, or returns None (writing
nothing) when no run holds the data it needs. Several runs are overlaid: colour = arm
(mode), one thin line per seed.

Source: PopuLoRA (arXiv 2605.16727) §4 (ratings, validity/solve rates, complexity,
coverage, entropy, response length, matchups, lineage, held-out accuracy).
"""

from __future__ import annotations

import io
import math
import re
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from evolora import metrics as run_metrics
from evolora.io import atomic_path
from evolora.report.data import POPULATION, RunData, complexity_metrics, held_out_groups, held_out_members, series

ARM_COLORS = {"population": "tab:blue", "single_agent": "tab:orange"}
_EXTRA_COLORS = ["tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
ROLE_ORDER = ("teacher", "student", "agent")
LINE = {"linewidth": 1.0, "alpha": 0.85}
DPI = 100


def arm_color(mode: str, modes: list[str] | None = None) -> str:
    """The colour of an arm: blue for population, orange for single_agent, then a fixed cycle."""
    if mode in ARM_COLORS:
        return ARM_COLORS[mode]
    others = sorted(m for m in (modes or [mode]) if m not in ARM_COLORS)
    return _EXTRA_COLORS[others.index(mode) % len(_EXTRA_COLORS)] if mode in others else "tab:gray"


def natural_key(text: str) -> list:
    """Sort key that orders ``t2`` before ``t10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(text))]


def _grid(panels: int, width: float = 5.0, height: float = 3.4):
    cols = min(3, max(1, panels))
    rows = math.ceil(panels / cols)
    fig = _figure((width * cols, height * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat[panels:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:panels])


def _figure(size: tuple[float, float]) -> Figure:
    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=DPI)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buffer.getvalue())
    return Path(path)


def _arm_handles(runs: list[RunData]) -> list[Line2D]:
    modes = list(dict.fromkeys(r.mode for r in runs))
    count = {m: sum(r.mode == m for r in runs) for m in modes}
    return [
        Line2D([], [], color=arm_color(m, modes), label=f"{m} ({count[m]} seed{'s' if count[m] != 1 else ''})")
        for m in modes
    ]


def _plot_series(ax, runs: list[RunData], getter, **style) -> bool:
    """Draw getter(run) -> (steps, values) for each run; True when anything was drawn."""
    modes = list(dict.fromkeys(r.mode for r in runs))
    drawn = False
    for run in runs:
        steps, values = getter(run)
        points = [(s, v) for s, v in zip(steps, values) if v is not None and math.isfinite(v)]
        if points:
            ax.plot(
                *zip(*points),
                color=arm_color(run.mode, modes),
                marker="." if len(points) < 3 else None,
                **{**LINE, **style},
            )
            drawn = True
    return drawn


def _finish_axes(ax, title: str, ylabel: str, runs: list[RunData], *, xlabel: str = "training step") -> None:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(handles=_arm_handles(runs), fontsize=8, loc="best")


# ---------------------------------------------------------------------------- over training
def _role_rating(run: RunData, role: str, conservative: bool) -> tuple[list[int], list[float | None]]:
    steps, values = [], []
    for record in run.metrics:
        rows = [r for r in (record.get("ratings") or {}).values() if r.get("role") == role]
        steps.append(record["step"])
        values.append(
            float(np.mean([r["mu"] - 3 * r["sigma"] if conservative else r["mu"] for r in rows])) if rows else None
        )
    return steps, values


def plot_ratings(runs: list[RunData], path: Path) -> Path | None:
    """Mean rating μ (solid) and conservative rating μ − 3σ (dashed) of each role's current members."""
    roles = sorted(
        {r.get("role") for run in runs for rec in run.metrics for r in (rec.get("ratings") or {}).values()} - {None},
        key=lambda role: (ROLE_ORDER.index(role) if role in ROLE_ORDER else 9, role),
    )
    if not roles:
        return None
    fig, axes = _grid(len(roles))
    for ax, role in zip(axes, roles):
        _plot_series(ax, runs, lambda run: _role_rating(run, role, False))
        _plot_series(ax, runs, lambda run: _role_rating(run, role, True), linestyle="--")
        _finish_axes(ax, f"{role} ratings (mean over members)", "rating (OpenSkill units)", runs)
        handles = _arm_handles(runs) + [
            Line2D([], [], color="black", label="μ"),
            Line2D([], [], color="black", linestyle="--", label="μ − 3σ"),
        ]
        ax.legend(handles=handles, fontsize=8, loc="best")
    return _save(fig, path)


def plot_rates(runs: list[RunData], path: Path) -> Path | None:
    """Validity rate of proposals and solve rate of graded attempts per step."""
    if not any(run.metrics for run in runs):
        return None
    fig, axes = _grid(2)
    for ax, key, title, ylabel in (
        (axes[0], "validity_rate", "validity rate", "valid proposals (fraction)"),
        (axes[1], "solve_rate", "solve rate", "correct attempts (fraction)"),
    ):
        _plot_series(ax, runs, lambda run: series(run, key))
        ax.set_ylim(-0.03, 1.03)
        _finish_axes(ax, title, ylabel, runs)
    return _save(fig, path)


def plot_complexity(runs: list[RunData], path: Path) -> Path | None:
    """Mean complexity of valid proposals (one panel per metric) and coverage (distinct problems)."""
    names = complexity_metrics(runs)
    has_coverage = any(series(run, "coverage")[1].count(None) < len(run.metrics) for run in runs)
    if not names and not has_coverage:
        return None
    fig, axes = _grid(len(names) + has_coverage)
    for ax, name in zip(axes, names):
        _plot_series(ax, runs, lambda run: series(run, "complexity", name))
        _finish_axes(
            ax,
            f"proposal complexity: {name.replace('_', ' ')}",
            f"{name.replace('_', ' ')} (mean over valid proposals)",
            runs,
        )
    if has_coverage:
        _plot_series(axes[-1], runs, lambda run: series(run, "coverage"))
        _finish_axes(axes[-1], "coverage", "distinct problem signatures (cumulative)", runs)
    return _save(fig, path)


def plot_entropy(runs: list[RunData], path: Path) -> Path | None:
    """Mean per-token entropy of the trained samples (nats) per step."""
    if all(series(run, "mean_entropy")[1].count(None) == len(run.metrics) for run in runs):
        return None
    fig, (ax,) = _grid(1, width=6.0)
    _plot_series(ax, runs, lambda run: series(run, "mean_entropy"))
    _finish_axes(ax, "mean token entropy", "entropy (nats per token)", runs)
    return _save(fig, path)


def plot_response_length(runs: list[RunData], path: Path) -> Path | None:
    """Mean response length per role (tokens) per step."""
    roles = sorted(
        {
            role
            for run in runs
            for rec in run.metrics
            for role, s in (rec.get("response_length") or {}).items()
            if (s or {}).get("count")
        },
        key=lambda role: (ROLE_ORDER.index(role) if role in ROLE_ORDER else 9, role),
    )
    if not roles:
        return None
    fig, axes = _grid(len(roles))
    for ax, role in zip(axes, roles):
        _plot_series(ax, runs, lambda run: series(run, "response_length", role, "mean"))
        _finish_axes(ax, f"{role} response length", "mean length (tokens)", runs)
    return _save(fig, path)


# ---------------------------------------------------------------------------- structure
def _first_population_run(runs: list[RunData], has) -> RunData | None:
    ordered = [r for r in runs if r.mode == POPULATION] + [r for r in runs if r.mode != POPULATION]
    return next((run for run in ordered if has(run)), None)


def plot_matchup(runs: list[RunData], path: Path) -> Path | None:
    """Teacher × student solve rate over all games of the first population run (from matches.jsonl)."""
    run = _first_population_run(runs, lambda r: r.mode == POPULATION and r.matches)
    if run is None:
        return None
    matrix = run_metrics.matchup_matrix(run.matches)
    teachers = sorted(matrix, key=natural_key)
    students = sorted({s for row in matrix.values() for s in row}, key=natural_key)
    values = np.array([[np.nan if matrix[t].get(s) is None else matrix[t][s] for s in students] for t in teachers])
    fig = _figure((min(14.0, max(4.5, 0.7 * len(students) + 2.5)), min(12.0, max(3.2, 0.5 * len(teachers) + 1.8))))
    ax = fig.subplots()
    cmap = colormaps["viridis"].with_extremes(bad="lightgray")
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
    for i in range(len(teachers)):
        for j in range(len(students)):
            if not np.isnan(values[i, j]):
                ax.text(
                    j,
                    i,
                    f"{values[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if values[i, j] < 0.6 else "black",
                )
    ax.set_xticks(range(len(students)), students)
    ax.set_yticks(range(len(teachers)), teachers)
    ax.set_xlabel("student")
    ax.set_ylabel("teacher")
    ax.set_title(f"matchup solve rate\n{run.path.name} ({run.label})", fontsize=10)
    fig.colorbar(image, ax=ax, label="solve rate (fraction correct)")
    return _save(fig, path)


def _lanes(nodes: list[dict]) -> dict[str, int]:
    """Lane (y) of each individual: its slot, teachers' slots first; a child without a slot
    inherits the lane of the member it replaced, else opens a new lane."""
    by_slot = sorted(
        {n["slot"] for n in nodes if n.get("slot")}, key=lambda s: (not str(s).upper().startswith("T"), natural_key(s))
    )
    lanes, slot_lane = {}, {slot: i for i, slot in enumerate(by_slot)}
    for node in nodes:
        if node.get("slot") in slot_lane:
            lanes[node["id"]] = slot_lane[node["slot"]]
        elif node.get("replaced") in lanes:
            lanes[node["id"]] = lanes[node["replaced"]]
        else:
            lanes[node["id"]] = max(list(lanes.values()) + list(slot_lane.values()), default=-1) + 1
    return lanes


def plot_lineage(runs: list[RunData], path: Path) -> Path | None:
    """Lineage of the first population run: x = birth step, y = population slot; an edge per
    parent → child, coloured by the operator that made the child."""
    run = _first_population_run(runs, lambda r: len(r.lineage()) > 0)
    if run is None:
        return None
    nodes = run.lineage()
    lanes = _lanes(nodes)
    where = {n["id"]: (n.get("born_step", 0), lanes[n["id"]]) for n in nodes}
    operators = sorted({n.get("operator", "?") for n in nodes if n.get("parents")})
    colors = dict(zip(operators, colormaps["tab10"].colors * (1 + len(operators) // 10)))
    width, height = 0.5 * run.steps + 3, 0.55 * (max(lanes.values()) + 1) + 1.5
    fig = _figure((min(16.0, max(6.0, width)), min(12.0, max(3.0, height))))
    ax = fig.subplots()
    for node in nodes:
        for parent in node.get("parents") or []:
            if parent in where:
                ax.annotate(
                    "",
                    xy=where[node["id"]],
                    xytext=where[parent],
                    arrowprops={
                        "arrowstyle": "->",
                        "color": colors[node.get("operator", "?")],
                        "linewidth": 1.2,
                        "shrinkA": 6,
                        "shrinkB": 6,
                    },
                )
    markers = {"teacher": "s", "student": "o", "agent": "D"}
    for node in nodes:
        x, y = where[node["id"]]
        ax.plot(x, y, marker=markers.get(node.get("role"), "^"), color="black", markersize=6, linestyle="")
        ax.annotate(node["id"], (x, y), textcoords="offset points", xytext=(4, 5), fontsize=8)
    slots = {}
    for node in nodes:
        slots.setdefault(lanes[node["id"]], node.get("slot") or node.get("role", "?"))
    ax.set_yticks(sorted(slots), [slots[lane] for lane in sorted(slots)])
    ax.invert_yaxis()
    ax.set_xlabel("birth step (training steps)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("population slot")
    ax.set_title(f"lineage, {run.label}" + ("" if run.finished else " (rebuilt from metrics: unfinished)"))
    ax.grid(axis="x", alpha=0.3)
    handles = [Line2D([], [], color=colors[o], label=o) for o in operators]
    handles += [
        Line2D([], [], marker=m, color="black", linestyle="", label=role)
        for role, m in markers.items()
        if any(n.get("role") == role for n in nodes)
    ]
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="operator / role")
    return _save(fig, path)


def plot_held_out(runs: list[RunData], path: Path) -> Path | None:
    """Held-out accuracy per run: the base model, and the members (bar = mean, error bar =
    min…max, dots = each member); single-agent runs sit next to population runs."""
    evaluated = [
        run for run in runs if held_out_members(run) or ((run.summary or {}).get("held_out") or {}).get("base")
    ]
    if not evaluated:
        return None
    evaluated.sort(key=lambda r: (r.mode != POPULATION, r.mode, r.seed if r.seed is not None else -1))
    modes = list(dict.fromkeys(r.mode for r in runs))
    fig = _figure((min(16.0, max(6.0, 1.3 * len(evaluated) + 2.5)), 4.0))
    ax = fig.subplots()
    width = 0.38
    for x, run in enumerate(evaluated):
        base = (run.summary["held_out"].get("base") or {}).get("accuracy")
        if base is not None:
            ax.bar(x - width / 2, base, width, color="lightgray", edgecolor="gray")
        members = list(held_out_members(run).values())
        if members:
            mean = float(np.mean(members))
            ax.bar(
                x + width / 2,
                mean,
                width,
                color=arm_color(run.mode, modes),
                alpha=0.8,
                yerr=[[mean - min(members)], [max(members) - mean]],
                capsize=4,
            )
            ax.scatter([x + width / 2] * len(members), members, color="black", s=10, zorder=3)
    ax.set_xticks(range(len(evaluated)), [f"{r.path.name}\n{r.label}" for r in evaluated], fontsize=8)
    ax.set_ylabel("held-out accuracy (fraction correct)")
    ax.set_xlabel("run")
    ax.set_title("held-out accuracy: base model vs members")
    top = max([b.get_height() for b in ax.patches] + [m for r in evaluated for m in held_out_members(r).values()])
    ax.set_ylim(0, min(1.05, max(0.1, 1.15 * top)))
    ax.grid(axis="y", alpha=0.3)
    handles = [Line2D([], [], color="lightgray", linewidth=8, label="base model")]
    handles += [
        Line2D([], [], color=arm_color(m, modes), linewidth=8, label=f"{m} members")
        for m in modes
        if any(r.mode == m for r in evaluated)
    ]
    ax.legend(handles=handles, fontsize=8, loc="best")
    return _save(fig, path)


def plot_held_out_groups(runs: list[RunData], path: Path) -> Path | None:
    """Held-out accuracy per group of items (arith: grid cell d<digits>o<operators>): the base
    model and each arm's best member, means over runs (:func:`held_out_groups`); None when no
    run's results have groups."""
    table = held_out_groups(runs)
    if not table:
        return None
    groups = list(dict.fromkeys(g for row in table.values() for g in row))
    keys = (["base"] if "base" in table else []) + [k for k in table if k != "base"]
    modes = list(dict.fromkeys(r.mode for r in runs))
    fig = _figure((min(16.0, max(6.0, 0.35 * len(groups) * len(keys) + 3.0)), 4.0))
    ax = fig.subplots()
    width = 0.8 / len(keys)
    for j, key in enumerate(keys):
        xs = [i + (j - (len(keys) - 1) / 2) * width for i in range(len(groups))]
        base = key == "base"
        ax.bar(
            xs,
            [table[key].get(g, math.nan) for g in groups],
            width,
            edgecolor="gray" if base else None,
            color="lightgray" if base else arm_color(key, modes),
            label="base model" if base else f"{key}: best member",
        )
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.set_xlabel("held-out group")
    ax.set_ylabel("held-out accuracy (fraction correct)")
    ax.set_ylim(0, 1.05)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title("held-out accuracy per group: base model vs each arm's best member (mean over runs)")
    return _save(fig, path)


FIGURES = (
    (
        "ratings",
        plot_ratings,
        "Ratings over training per role: mean μ (solid) and conservative μ − 3σ (dashed) "
        "of the current members; one thin line per seed, colour = arm. A single agent stays at its prior.",
    ),
    ("rates", plot_rates, "Validity rate of proposals and solve rate of graded attempts per step."),
    (
        "complexity",
        plot_complexity,
        "Mean complexity of valid proposals per metric, and coverage (distinct problem signatures seen so far).",
    ),
    ("entropy", plot_entropy, "Mean per-token entropy of the trained samples, in nats."),
    ("response_length", plot_response_length, "Mean response length per role, in tokens."),
    (
        "matchup",
        plot_matchup,
        "Teacher × student solve rate over all games of the first population run "
        "(cumulative, from matches.jsonl); gray: the pair never met or none of its attempts was graded.",
    ),
    (
        "lineage",
        plot_lineage,
        "Lineage of the first population run: x = birth step, y = slot; edges go "
        "parent → child, coloured by the operator that made the child.",
    ),
    (
        "held_out",
        plot_held_out,
        "Held-out accuracy of every run: base model (gray) and members "
        "(bar = mean, whiskers = min–max, dots = members; a single agent is one member).",
    ),
    (
        "held_out_groups",
        plot_held_out_groups,
        "Held-out accuracy per group of problems (arith: grid cell "
        "d<digits>o<operators>), mean over runs: base model (gray) and each arm's best member. Drawn when "
        "the task's held-out items have groups.",
    ),
)
"""(name, function, caption) of every report figure, in page order."""

__all__ = [
    "ARM_COLORS",
    "FIGURES",
    "arm_color",
    "natural_key",
    "plot_complexity",
    "plot_entropy",
    "plot_held_out",
    "plot_held_out_groups",
    "plot_lineage",
    "plot_matchup",
    "plot_rates",
    "plot_ratings",
    "plot_response_length",
]
