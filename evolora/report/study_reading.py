"""The pre-stated reading of a study, applied to the unrounded numbers of its ``stats.json``
(:func:`evolora.report.study_stats.study_stats`): the verdict of a paired comparison and whether
selection met its targets are the rule's, decided before rounding, not the reader's.

    stats = json.loads(Path("analysis/primary/stats.json").read_text())
    reading = study_reading(stats, "population − no_evolution", arm="population")
    print(render_reading(reading))

The rule (docs/results/evolution.md, "Endpoints"): a difference exists when the 95 % t interval of
the paired differences excludes 0 *and* the exact sign-flip p is below 0.05; otherwise the interval
is the size of effect the study rules out. The item × seed bootstrap does not decide; when it and
the t interval disagree on 0, the result is sensitive to the sampling of items. When no difference
is found and a precondition of selection (fitness validity, S > 0 share) is unmet, the study
detected no effect of an outer loop whose selection did not reach its preconditions. Source:
PopuLoRA (arXiv 2605.16727) §2 step 5 (evolution) and §4 (held-out accuracy).
"""

from __future__ import annotations

ALPHA = 0.05
"""Two-sided level of the exact sign-flip test."""

TARGETS = {
    "fitness validity": 0.5,
    "S > 0 share": 0.7,
    "events per run": 9,
    "least share replaced": 0.5,
    "|ρ(fitness, birth step)|": 0.2,
}
"""Each target of whether selection acted and its threshold (issue targets on evolution.md)."""

PRECONDITIONS = ("fitness validity", "S > 0 share")
"""The targets without which a null result says nothing about a loop that acted."""


def _excludes_zero(interval: dict | None) -> bool | None:
    if interval is None or interval.get("low") is None or interval.get("high") is None:
        return None
    return interval["low"] > 0 or interval["high"] < 0


def read_comparison(row: dict) -> dict:
    """The verdict on one paired comparison of ``stats["comparisons"]``.

    Args:
        row: {"comparison": "reference − arm", "seeds", "mean": t interval with "p" (fractions),
            "bootstrap": percentile interval or None} (:func:`evolora.report.study_stats.paired_comparisons`).

    Returns:
        {"comparison", "n", "mean", "low", "high", "p" (fractions; None without pairs),
        "verdict": "higher" (the reference arm scores higher), "lower" or "none",
        "bootstrap_agrees": whether the bootstrap interval excludes 0 exactly when the t interval
        does (None without a bootstrap)}.
    """
    mean = row.get("mean") or {}
    t_excludes = _excludes_zero(mean)
    p = mean.get("p")
    verdict = "none"
    if t_excludes and p is not None and p < ALPHA:
        verdict = "higher" if mean["low"] > 0 else "lower"
    boot = _excludes_zero(row.get("bootstrap"))
    return {
        "comparison": row["comparison"],
        "n": mean.get("n", 0),
        **{key: mean.get(key) for key in ("mean", "low", "high", "p")},
        "verdict": verdict,
        "bootstrap_agrees": None if boot is None or t_excludes is None else boot == t_excludes,
    }


def selection_targets(stats: dict, arm: str) -> list[dict]:
    """Whether ``arm``'s selection met each target of :data:`TARGETS` that its records measure.

    Returns:
        [{"target", "value" (None: undefined, e.g. a ρ with every pair tied), "threshold", "met"}];
        an undefined value is unmet. Targets: pooled ρ(final fitness, held-out accuracy) ≥ 0.5; share
        of events with S on audited held-out accuracy > 10⁻⁹ ≥ 0.7; the fewest events of a run ≥ 9;
        the least share of a role replaced at an event ≥ 0.5; |pooled ρ(fitness, birth step)| ≤ 0.2
        for each role (one row per role).
    """
    events = stats.get("events", {}).get(arm)
    values: list[tuple[str, float | None]] = []
    validity = stats.get("fitness_rho", {}).get(arm, {}).get("fitness")
    if validity is not None:
        values.append(("fitness validity", validity["rho"]))
    if events is not None:
        values.append(("S > 0 share", events["breeding"]["held_out"]["positive"]))
        values.append(("events per run", min(events["per_run"].values(), default=None)))
        values.append(("least share replaced", events["least_share"]))
    rows = [
        {
            "target": name,
            "value": value,
            "threshold": TARGETS[name],
            "met": value is not None and value >= TARGETS[name],
        }
        for name, value in values
    ]
    for key, record in sorted(stats.get("birth_rho", {}).items()):
        if key.startswith(f"{arm}/"):
            rho, limit = record["rho"], TARGETS["|ρ(fitness, birth step)|"]
            role = key.split("/", 1)[1]
            rows.append(
                {
                    "target": f"|ρ(fitness, birth step)|, {role}s",
                    "value": rho,
                    "threshold": limit,
                    "met": rho is not None and abs(rho) <= limit,
                }
            )
    return rows


def study_reading(stats: dict, comparison: str, *, arm: str) -> dict:
    """The reading of ``comparison`` ("reference − arm") with the selection targets of ``arm``.

    Returns:
        {"comparison": :func:`read_comparison`, "targets": :func:`selection_targets`,
        "unfinished": {arm: seeds}, "sentence": the rule's one-paragraph reading}.

    Raises:
        KeyError: ``stats`` has no such comparison (the message lists those it has).
    """
    rows = {row["comparison"]: row for row in stats.get("comparisons", [])}
    if comparison not in rows:
        raise KeyError(f"no comparison {comparison!r} in stats.json; it has {sorted(rows)}")
    reading = read_comparison(rows[comparison])
    targets = selection_targets(stats, arm)
    unfinished = {a: s["unfinished"] for a, s in stats.get("runs", {}).items() if s["unfinished"]}
    return {
        "comparison": reading,
        "targets": targets,
        "unfinished": unfinished,
        "sentence": _sentence(reading, targets, unfinished),
    }


def _points(value: float) -> str:
    return f"{100 * value:+.2f}"


def _sentence(reading: dict, targets: list[dict], unfinished: dict) -> str:
    if not reading["n"]:
        return f"{reading['comparison']}: no seed finished in both arms; nothing to read."
    head = (
        f"{reading['comparison']}: {_points(reading['mean'])} points [{_points(reading['low'])}, "
        f"{_points(reading['high'])}] (95 % t, n = {reading['n']}), exact sign-flip p = {reading['p']:.4f}."
    )
    reference, other = reading["comparison"].split(" − ")
    unmet = [t["target"] for t in targets if t["target"] in PRECONDITIONS and not t["met"]]
    if reading["verdict"] != "none":
        body = f"`{reference}` scores {reading['verdict']} than `{other}` (the interval excludes 0 and p < {ALPHA})."
    elif unmet:
        body = (
            "No detectable effect of an outer loop whose selection did not reach its preconditions "
            f"(unmet: {', '.join(unmet)}); not evidence that evolution cannot help."
        )
    else:
        body = "No detectable difference; the interval is the size of effect ruled out for a loop whose selection met its preconditions."
    notes = []
    if reading["bootstrap_agrees"] is False:
        notes.append(
            "The item × seed bootstrap disagrees with the t interval on 0: the result is sensitive to the sampling of items."
        )
    if unfinished:
        listed = "; ".join(f"{a}: seeds {', '.join(map(str, s))}" for a, s in sorted(unfinished.items()))
        notes.append(f"Unfinished runs ({listed}); the sign-flip p has 2^{reading['n']} sign patterns.")
    return " ".join([head, body, *notes])


def render_reading(reading: dict) -> str:
    """Markdown: the reading's sentence and a table of the targets (value, threshold, met)."""
    lines = [reading["sentence"], "", "| target | value | threshold | met |", "|---|---|---|---|"]
    for t in reading["targets"]:
        value = "undefined" if t["value"] is None else f"{t['value']:.4f}".rstrip("0").rstrip(".")
        bound = f"≤ {t['threshold']}" if t["target"].startswith("|ρ") else f"≥ {t['threshold']}"
        name = t["target"].replace("|", "\\|")  # a bar inside a table cell
        lines.append(f"| {name} | {value} | {bound} | {'yes' if t['met'] else 'no'} |")
    return "\n".join(lines) + "\n"
