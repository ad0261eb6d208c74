"""Loading run directories and aggregating them per arm, for ``evolora report`` / ``compare``.

    runs    = [load_run(path) for path in run_dirs]      # config, metrics, matches, summary
    summary = summarize(runs)                           # per arm: held-out, complexity trend, rates

An *arm* is the study arm of a run (``study.arm``, e.g. ``no_evolution``), else its self-play
mode (``selfplay.mode``: ``population`` or ``single_agent``); runs of one arm with different seeds are replicates, aggregated as a mean with a 95 %
Student-t interval. Pure data: no plotting, no writing.

Source: PopuLoRA (arXiv 2605.16727) §4 (held-out accuracy of the population vs. a single
agent; arms-race metrics over training).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml
from scipy import stats

from evolora.game import MEMBER_ROLES
from evolora.io import read_jsonl

POPULATION, SINGLE_AGENT = "population", "single_agent"
COMPLEXITY_PREFERENCE = ("depth", "ast_depth")  # the trend metric, else the first one logged
CONFIDENCE = 0.95


@dataclass
class RunData:
    """Everything one run directory holds, as loaded by :func:`load_run`.

    Attributes:
        path: the run directory.
        config: the resolved config (``config.yaml``) as a dict; {} when missing.
        mode: the arm: ``study.arm`` when set, else ``selfplay.mode``, else the summary's ``mode``,
            else ``single_agent`` when the run has an agent and ``population`` otherwise.
        task: ``task.name`` (from the config, else the summary; "?" when neither says).
        seed: ``run.seed``; None when unknown.
        metrics: ``metrics.jsonl`` records, one per step (partial last line ignored).
        matches: ``matches.jsonl`` records, one per game.
        summary: ``final/summary.json``; None for an unfinished run.
        missing: human-readable notes on the files that were absent.
    """

    path: Path
    config: dict
    mode: str
    task: str
    seed: int | None
    metrics: list[dict]
    matches: list[dict]
    summary: dict | None
    missing: list[str] = field(default_factory=list)

    @property
    def steps(self) -> int:
        """Steps done: the summary's count, else the last logged step, else 0."""
        if self.summary and "steps" in self.summary:
            return int(self.summary["steps"])
        return int(self.metrics[-1]["step"]) if self.metrics else 0

    @property
    def finished(self) -> bool:
        """True when ``final/summary.json`` exists."""
        return self.summary is not None

    @property
    def label(self) -> str:
        """Short name for legends: ``<mode> seed <seed>``."""
        return f"{self.mode} seed {self.seed if self.seed is not None else '?'}"

    def lineage(self) -> list[dict]:
        """Every individual ever born: {id, role, slot, parents, operator, born_step}.

        From ``final/summary.json`` when present; for an unfinished run, rebuilt from the
        first step's ratings (the initial members) and each step's ``births``.
        """
        if self.summary and self.summary.get("lineage"):
            return list(self.summary["lineage"])
        if not self.metrics:
            return []
        nodes = [
            {"id": i, "role": r.get("role", "?"), "slot": None, "parents": [], "operator": "init", "born_step": 0}
            for i, r in self.metrics[0].get("ratings", {}).items()
        ]
        for record in self.metrics:
            for birth in record.get("births", []):
                replaced = next((n for n in nodes if n["id"] == birth.get("replaced")), None)
                nodes.append(
                    {
                        "id": birth["child"],
                        "role": birth.get("role", "?"),
                        "slot": replaced.get("slot") if replaced else None,
                        "parents": list(birth.get("parents", [])),
                        "operator": birth.get("operator", "?"),
                        "born_step": birth.get("step", record["step"]),
                        "replaced": birth.get("replaced"),
                    }
                )
        return nodes


def load_run(path: str | Path) -> RunData:
    """Load one run directory written by ``evolora evolve`` (finished or not).

    Args:
        path: a run directory holding ``config.yaml`` and/or ``metrics.jsonl`` (plus
            ``matches.jsonl`` and ``final/summary.json`` when present).

    Returns:
        A :class:`RunData`; absent files are listed in ``missing`` (an unfinished run has no
        ``final/summary.json``, hence no held-out accuracy or final lineage).

    Raises:
        FileNotFoundError: ``path`` does not exist or is not a directory.
        ValueError: ``path`` holds neither ``config.yaml`` nor ``metrics.jsonl`` (not a run
            directory), or one of its JSON/YAML files is malformed.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such run directory; give the --out directory of an `evolora evolve` run")
    config_file, metrics_file = path / "config.yaml", path / "metrics.jsonl"
    if not config_file.exists() and not metrics_file.exists():
        raise ValueError(
            f"{path} is not a run directory (no config.yaml or metrics.jsonl); "
            "give the --out directory of an `evolora evolve` run"
        )
    missing = []
    try:
        config = (yaml.safe_load(config_file.read_text()) or {}) if config_file.exists() else {}
        summary_file = path / "final" / "summary.json"
        summary = json.loads(summary_file.read_text()) if summary_file.exists() else None
    except (yaml.YAMLError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: malformed run file ({error})") from error
    if not isinstance(config, dict) or not isinstance(summary, (dict, type(None))):
        raise ValueError(f"{path}: config.yaml or final/summary.json does not hold a mapping")
    for name, present in (
        ("config.yaml", config_file.exists()),
        ("metrics.jsonl", metrics_file.exists()),
        ("matches.jsonl", (path / "matches.jsonl").exists()),
    ):
        if not present:
            missing.append(f"{name} is missing")
    if summary is None:
        missing.append(
            "final/summary.json is missing (run unfinished): no held-out accuracy, lineage rebuilt from metrics.jsonl"
        )
    metrics = read_jsonl(metrics_file)
    mode = (
        (config.get("study") or {}).get("arm")
        or (config.get("selfplay") or {}).get("mode")
        or (summary or {}).get("mode")
        or (SINGLE_AGENT if _has_role(metrics, summary, "agent") else POPULATION)
    )
    task = (config.get("task") or {}).get("name") or (summary or {}).get("task") or "?"
    seed = (config.get("run") or {}).get("seed")
    return RunData(
        path=path,
        config=config,
        mode=str(mode),
        task=str(task),
        seed=seed,
        metrics=metrics,
        matches=read_jsonl(path / "matches.jsonl"),
        summary=summary,
        missing=missing,
    )


def _has_role(metrics: list[dict], summary: dict | None, role: str) -> bool:
    if summary:
        return any(i.get("role") == role for i in summary.get("individuals", []))
    return bool(metrics) and any(r.get("role") == role for r in metrics[0].get("ratings", {}).values())


# ---------------------------------------------------------------------------- statistics
def t_interval(values, confidence: float = CONFIDENCE, bounds: tuple[float, float] | None = None) -> dict:
    """Mean of ``values`` with a two-sided Student-t confidence interval.

    Args:
        values: finite numbers (None and NaN are dropped), e.g. one per seed.
        confidence: interval coverage in (0, 1); 0.95 by default.
        bounds: (lowest, highest) possible value, e.g. (0, 1) for a fraction: the interval
            is clipped to it (with two seeds t = 12.7 and a raw interval easily leaves [0, 1]).

    Returns:
        {"mean", "low", "high", "n", "values"}: ``mean ± t_{(1+c)/2, n-1} · s / √n`` with the
        sample standard deviation s (ddof 1). ``low``/``high`` are None when n < 2; every
        number is None when n = 0.
    """
    kept = [float(v) for v in values if v is not None and math.isfinite(v)]
    out = {"mean": None, "low": None, "high": None, "n": len(kept), "values": kept}
    if not kept:
        return out
    out["mean"] = float(np.mean(kept))
    if len(kept) >= 2:
        half = stats.t.ppf((1 + confidence) / 2, len(kept) - 1) * np.std(kept, ddof=1) / math.sqrt(len(kept))
        out["low"], out["high"] = out["mean"] - float(half), out["mean"] + float(half)
        if bounds is not None:
            out["low"], out["high"] = max(out["low"], bounds[0]), min(out["high"], bounds[1])
    return out


def slope(steps, values) -> float | None:
    """Least-squares slope of ``values`` against ``steps`` (units of value per step).

    Pairs whose value is None or NaN are dropped; None when fewer than two distinct steps remain.
    """
    points = [(float(s), float(v)) for s, v in zip(steps, values) if v is not None and math.isfinite(v)]
    if len({s for s, _ in points}) < 2:
        return None
    x, y = np.array(points).T
    return float(np.polyfit(x, y, 1)[0])


# ---------------------------------------------------------------------------- per run
def complexity_metrics(runs: list[RunData]) -> list[str]:
    """Complexity metric names logged by any run (``count`` excluded), in first-seen order."""
    names: list[str] = []
    for run in runs:
        for record in run.metrics:
            names += [k for k in (record.get("complexity") or {}) if k != "count" and k not in names]
    return names


def trend_metric(runs: list[RunData]) -> str | None:
    """The complexity metric used for the trend: ``depth`` (arith), ``ast_depth`` (programs),
    else the first one logged; None when no run logged any."""
    names = complexity_metrics(runs)
    return next((n for n in COMPLEXITY_PREFERENCE if n in names), names[0] if names else None)


def series(run: RunData, key: str, *path: str) -> tuple[list[int], list[float | None]]:
    """(steps, values) of ``record[key][path...]`` over the run's metrics; missing values are None."""
    steps, values = [], []
    for record in run.metrics:
        value = record.get(key)
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        steps.append(record["step"])
        values.append(value if isinstance(value, (int, float)) and not isinstance(value, bool) else None)
    return steps, values


def held_out_members(run: RunData) -> dict[str, float]:
    """Held-out accuracy (fraction in [0, 1]) of each evaluated member: students, or the agent.

    Empty for an unfinished run. Members are the non-``base`` entries of ``summary.held_out``
    whose role is student or agent (every non-base entry when roles are unknown).
    """
    if not run.summary:
        return {}
    roles = {i["id"]: i.get("role") for i in run.summary.get("individuals", [])}
    return {
        i: r["accuracy"]
        for i, r in (run.summary.get("held_out") or {}).items()
        if i != "base" and r and r.get("accuracy") is not None and roles.get(i, "student") in MEMBER_ROLES
    }


def run_numbers(run: RunData, metric: str | None) -> dict:
    """One run's headline numbers: held-out base / best / mean accuracy (fractions; None when
    not evaluated), complexity slope of ``metric`` (units per step), mean validity and solve rate."""
    members = held_out_members(run)
    base = ((run.summary or {}).get("held_out") or {}).get("base") or {}
    mean = lambda values: float(np.mean(values)) if values else None  # noqa: E731
    best, average = (max(members.values()) if members else None), mean(list(members.values()))
    gain = lambda value: value - base["accuracy"] if value is not None and base.get("accuracy") is not None else None  # noqa: E731
    entropy = [v for v in series(run, "mean_entropy")[1] if v is not None]
    coverage = [v for v in series(run, "coverage")[1] if v is not None]
    edge = max(1, len(entropy) // 5)  # first and last fifth of the run
    return {
        "base": base.get("accuracy"),
        "best": best,
        "mean": average,
        "gain_best": gain(best),
        "gain_mean": gain(average),
        "coverage": float(coverage[-1]) if coverage else None,
        "entropy_start": mean(entropy[:edge]),
        "entropy_end": mean(entropy[-edge:]),
        "complexity_slope": slope(*series(run, "complexity", metric)) if metric else None,
        "validity": mean([v for v in series(run, "validity_rate")[1] if v is not None]),
        "solve_rate": mean([v for v in series(run, "solve_rate")[1] if v is not None]),
    }


UNBOUNDED = ("gain_best", "gain_mean", "coverage", "entropy_start", "entropy_end")
"""Per-run numbers of :func:`summarize` whose intervals are not clipped to [0, 1]."""


def summarize(runs: list[RunData]) -> dict:
    """Aggregate runs per arm (mode) over seeds.

    Args:
        runs: loaded runs (:func:`load_run`); several seeds per arm give intervals.

    Returns:
        ``{"complexity_metric": name or None, "arms": {mode: {...}}}`` where each arm holds
        ``runs`` (count), ``seeds`` and, for each of ``base``, ``best``, ``mean`` (held-out
        accuracy, fractions in [0, 1], of the base model, the best member — the best student,
        or the agent — and the mean over members), ``complexity_slope`` (least-squares slope
        of the mean trend-metric complexity of valid proposals vs step, units per step),
        ``validity`` and ``solve_rate`` (per-run means over steps); ``gain_best`` and
        ``gain_mean`` (best member and member mean minus the base, per run: the interval is
        paired by seed), ``coverage`` (distinct problem signatures at the last step) and
        ``entropy_start`` / ``entropy_end`` (mean token entropy, nats, over the first and last
        fifth of the steps): each a :func:`t_interval`
        dict over the runs that have the number (95 % interval when at least two do; the
        intervals of fractions are clipped to [0, 1]).
        "Best" is chosen on the held-out set itself, so it is an optimistic upper bound.
        ``paired`` (None unless both arms share a seed): population minus single agent per
        seed for ``mean``, ``best`` and ``complexity_slope``, each a :func:`t_interval`.

    Raises:
        ValueError: ``runs`` is empty.

    Source: PopuLoRA (arXiv 2605.16727) §4.
    """
    if not runs:
        raise ValueError("summarize: give at least one run")
    metric = trend_metric(runs)
    arms: dict[str, dict] = {}
    for run in runs:
        arm = arms.setdefault(run.mode, {"runs": 0, "seeds": [], "numbers": []})
        arm["runs"] += 1
        arm["seeds"].append(run.seed)
        arm["numbers"].append(run_numbers(run, metric))
    paired = _paired(arms)
    for arm in arms.values():
        numbers = arm.pop("numbers")
        for key in ("base", "best", "mean", "complexity_slope", "validity", "solve_rate"):
            arm[key] = t_interval([n[key] for n in numbers], bounds=None if key == "complexity_slope" else (0.0, 1.0))
        for key in UNBOUNDED:
            arm[key] = t_interval([n[key] for n in numbers])
    return {"complexity_metric": metric, "arms": arms, "paired": paired}


def _paired(arms: dict[str, dict]) -> dict | None:
    """Population minus single agent, seed by seed (same seed: same base, same held-out items).

    Returns None unless both arms have runs with a common seed; else ``{"seeds": [...], key:
    t_interval of the per-seed differences}`` for ``mean``, ``best`` and ``complexity_slope``.
    Pairing removes the between-seed variance that the per-arm intervals carry.
    """
    if POPULATION not in arms or SINGLE_AGENT not in arms:
        return None
    by_seed = [
        {seed: n for seed, n in zip(arms[mode]["seeds"], arms[mode]["numbers"]) if seed is not None}
        for mode in (POPULATION, SINGLE_AGENT)
    ]
    seeds = sorted(set(by_seed[0]) & set(by_seed[1]))
    if not seeds:
        return None
    out: dict = {"seeds": seeds}
    for key in ("mean", "best", "complexity_slope"):
        diffs = [
            by_seed[0][s][key] - by_seed[1][s][key]
            for s in seeds
            if by_seed[0][s][key] is not None and by_seed[1][s][key] is not None
        ]
        out[key] = t_interval(diffs)
    return out


def held_out_groups(runs: list[RunData]) -> dict[str, dict[str, float]]:
    """Held-out accuracy per group of items (fraction correct, in [0, 1]; arith: the grid cells
    ``d<digits>o<operators>``), mean over the finished runs whose results have groups:
    {"base": {group: accuracy}, <arm>: {group: accuracy of each run's best member}}. A run's best
    member has the highest overall held-out accuracy (ties: the first id). Empty when no run has
    groups. Source: PopuLoRA (arXiv 2605.16727) §4 (held-out accuracy of members vs the base)."""
    values: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        held = (run.summary or {}).get("held_out") or {}
        members = {k: v for k, v in held.items() if k != "base" and (v or {}).get("by_group")}
        entries = [("base", held["base"]["by_group"])] if (held.get("base") or {}).get("by_group") else []
        if members:
            best = max(sorted(members), key=lambda k: members[k]["accuracy"])
            entries.append((run.mode, members[best]["by_group"]))
        for key, groups in entries:
            for group, count in groups.items():
                rate = count["correct"] / count["total"] if count["total"] else math.nan
                values.setdefault(key, {}).setdefault(group, []).append(rate)
    return {key: {group: float(np.mean(v)) for group, v in groups.items()} for key, groups in values.items()}


__all__ = [
    "POPULATION",
    "SINGLE_AGENT",
    "RunData",
    "complexity_metrics",
    "held_out_groups",
    "held_out_members",
    "load_run",
    "run_numbers",
    "series",
    "slope",
    "summarize",
    "t_interval",
    "trend_metric",
]
