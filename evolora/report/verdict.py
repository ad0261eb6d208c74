"""The end-of-run verdict: held-out accuracies with their 95 % intervals and n, the in-run trend of
each side, and one plain sentence on whether the best member's gain over the base is outside the noise.

    wilson(3, 16)                  # (0.1875, 0.066, 0.430): 16 problems cannot separate 0 % from 6 %
    run_verdict(summary, records)  # {"held_out": ..., "trend": ..., "sentence": "..."}

Intervals: Wilson's score interval for one accuracy, Newcombe's hybrid score interval (method 10)
for the difference of two (Newcombe 1998, Statistics in Medicine 17:873). Source: PopuLoRA
(arXiv 2605.16727) §4 (held-out accuracy of the members against the base).
"""

from __future__ import annotations

import math

Z95 = 1.959963984540054
"""The two-sided 95 % normal quantile."""


def wilson(correct: int, total: int, z: float = Z95) -> tuple[float, float, float]:
    """(accuracy, low, high): Wilson's score interval of ``correct`` out of ``total`` (fractions).

    Raises:
        ValueError: unless 0 <= correct <= total and total >= 1.
    """
    if not (total >= 1 and 0 <= correct <= total):
        raise ValueError(f"wilson needs 0 <= correct <= total and total >= 1, got {correct}/{total}")
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return p, max(0.0, centre - half), min(1.0, centre + half)


def difference(a: tuple[int, int], b: tuple[int, int]) -> tuple[float, float, float]:
    """(p_a − p_b, low, high): Newcombe's hybrid score interval of the difference of two accuracies."""
    pa, la, ua = wilson(*a)
    pb, lb, ub = wilson(*b)
    delta = pa - pb
    return delta, delta - math.sqrt((pa - la) ** 2 + (ub - pb) ** 2), delta + math.sqrt((ua - pa) ** 2 + (pb - lb) ** 2)


def trends(records: list[dict]) -> dict[str, tuple[float | None, float | None]]:
    """{metric: (mean over the first fifth of the steps, mean over the last fifth)} for validity,
    solve rate and each side's rating spread (max − min of μ − 3σ among its members)."""
    if not records:
        return {}
    edge = max(1, len(records) // 5)
    series = {
        "validity": [r.get("validity_rate") for r in records],
        "solve rate": [r.get("solve_rate") for r in records],
    }
    for role in sorted({v["role"] for r in records for v in r.get("ratings", {}).values()}):
        series[f"{role} rating spread"] = [_spread(r, role) for r in records]
    mean = lambda values: (sum(values) / len(values)) if values else None  # noqa: E731
    return {
        name: (mean([v for v in values[:edge] if v is not None]), mean([v for v in values[-edge:] if v is not None]))
        for name, values in series.items()
    }


def _spread(record: dict, role: str) -> float | None:
    values = [v["mu"] - 3 * v["sigma"] for v in record.get("ratings", {}).values() if v["role"] == role]
    return max(values) - min(values) if len(values) > 1 else None


def solve_rate_sentence(records: list[dict]) -> str:
    """One sentence: did the students' solve rate on valid problems rise from the first fifth of the
    steps to the last (at least one step each)? Pools the ``graded``/``correct`` counts of each end and
    gives the difference with Newcombe's 95 % interval (attempts at one problem are correlated, so the
    interval is narrower than the truth). Records without counts (older runs) give no sentence ("")."""
    if len(records) < 2 or any("graded" not in r for r in records):
        return ""
    edge = max(1, len(records) // 5)
    first, last = records[:edge], records[-edge:]
    pooled = [(sum(r["correct"] for r in end), sum(r["graded"] for r in end)) for end in (first, last)]
    if not pooled[0][1] or not pooled[1][1]:
        return "The students' in-run solve rate cannot be compared: no valid problem was played in the first or last steps."
    delta, low, high = difference(pooled[1], pooled[0])
    word = "rose" if low > 0 else "fell" if high < 0 else "did not change beyond the noise"
    return (
        f"The students' in-run solve rate on valid problems {word}: {pooled[0][0]}/{pooled[0][1]} attempts in the "
        f"first {edge} step(s), {pooled[1][0]}/{pooled[1][1]} in the last {edge}, {100 * delta:+.1f} points, "
        f"95 % interval [{100 * low:+.1f}, {100 * high:+.1f}]."
    )


def run_verdict(summary: dict, records: list[dict]) -> dict:
    """Intervals of every held-out accuracy, the in-run trends and the sentence (see the module doc);
    with a family set (``summary["held_out_family"]``: :mod:`evolora.evaluation.family`), also
    ``"family"``: its intervals, its sentence and what it measures, reported beside the main set."""
    intervals, sentence = _compare_base(summary.get("held_out") or {}, summary.get("held_out_members"))
    verdict = {
        "held_out": intervals,
        "trend": trends(records),
        "sentence": sentence,
        "in_run": solve_rate_sentence(records),
    }
    family = summary.get("held_out_family")
    if family:  # two sets: each sentence says what its set measures
        verdict["sentence"] = f"On {summary.get('held_out_source') or 'the held-out set'}: {sentence}"
        intervals, sentence = _compare_base(family["held_out"], summary.get("held_out_members"), key="eval.family")
        verdict["family"] = {
            "held_out": intervals,
            "source": family["source"],
            "excluded": family["excluded"],
            "sentence": f"On {family['source']}: {sentence}",
        }
    return verdict


def _compare_base(results: dict, members_kind: str | None, key: str = "eval.limit") -> tuple[dict, str]:
    """({name: {"accuracy", "low", "high", "n"}}, the sentence on the best member against the base)."""
    held = {name: r for name, r in results.items() if r and r.get("total")}
    intervals = {name: wilson(r["correct"], r["total"]) + (r["total"],) for name, r in held.items()}
    members = [name for name in held if name != "base"]
    sentence = "No held-out evaluation: nothing to compare with the base."
    if "base" in held and members:
        best = max(members, key=lambda name: held[name]["accuracy"])
        delta, low, high = difference(
            (held[best]["correct"], held[best]["total"]), (held["base"]["correct"], held["base"]["total"])
        )
        outside = low > 0 or high < 0
        if len(members) > 1:
            who = f"The best member ({best}, chosen on these problems, so the figure is optimistic)"
        elif members_kind == "fittest":
            who = f"The fittest student ({best}, chosen by the run's fitness, not on these problems)"
        else:
            who = f"The member ({best})"
        sentence = (
            f"{who} differs from the base by {100 * delta:+.1f} points, 95 % interval "
            f"[{100 * low:+.1f}, {100 * high:+.1f}] on {held[best]['total']} problems: "
            + (
                "outside the noise."
                if outside
                else f"within the noise; more held-out problems (--set {key}=N) would be needed to tell."
            )
        )
        if held["base"].get("cached"):
            sentence += (
                " The base's answers were reused from evolora's cache (the same model, items, prompts"
                " and decoding; --set eval.cache_base=false evaluates it again)."
            )
    return {name: dict(zip(("accuracy", "low", "high", "n"), v)) for name, v in intervals.items()}, sentence
