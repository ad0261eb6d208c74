"""``evolora report``: PNG figures and one self-contained HTML page over run directories.

    path = write_report(["runs/pop-s0", "runs/pop-s1", "runs/single-s0"], "runs/report")

The page holds a table of runs, a summary per arm (held-out accuracy of the base, the best
member and the member mean with 95 % t-intervals over seeds; the complexity trend) and every
figure of :mod:`evolora.report.plots`, embedded as base64 PNG data URIs (no external files
needed to view it; the PNGs are also written next to it). Loading and statistics live in
:mod:`evolora.report.data`.

Source: PopuLoRA (arXiv 2605.16727) §4.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Iterable

from evolora.io import write_json_atomic, write_text_atomic
from evolora.report.breeding import FIGURE as BREEDING_FIGURE
from evolora.report.breeding import breeders_rows, breeders_summary
from evolora.report.data import RunData, load_run, summarize
from evolora.report.plots import FIGURES

REPORT_HTML = "report.html"
REPORT_JSON = "report.json"
MISSING = {  # why a figure is not drawn, where the reason is known: the line the page shows instead
    "held_out": (
        "no run here has a held-out evaluation (started with --no-eval, or unfinished); "
        "evolora evaluate RUN_DIR adds one to a finished run"
    ),
    "held_out_groups": (
        "no held-out accuracy per group in these runs (only a task with groups has it, such as arith's grid "
        "cells, and only a run with a held-out evaluation: evolora evaluate RUN_DIR adds one to a finished run)"
    ),
}


def format_stat(stat: dict, *, percent: bool = True, digits: int = 1) -> str:
    """Text of a :func:`evolora.report.data.t_interval` dict: ``12.5% [8.1, 16.9]`` (95 % CI),
    ``12.5% (n=1)`` for a single run, ``missing`` when no run has the number."""
    if stat["mean"] is None:
        return "missing"
    scale, unit = (100.0, "%") if percent else (1.0, "")
    text = f"{stat['mean'] * scale:.{digits}f}{unit}"
    if stat["low"] is None:
        return f"{text} (n={stat['n']})"
    return f"{text} [{stat['low'] * scale:.{digits}f}, {stat['high'] * scale:.{digits}f}] (n={stat['n']})"


def summary_rows(summary: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the per-arm summary table shared by the HTML page and ``evolora compare``."""
    metric = summary["complexity_metric"] or "complexity"
    header = [
        "arm",
        "runs (seeds)",
        "held-out base",
        "held-out best member",
        "held-out member mean",
        "best − base (paired)",
        "mean − base (paired)",
        f"{metric} slope (per step)",
        "validity (mean over steps)",
        "solve rate (mean over steps)",
        "coverage (last step)",
        "entropy start → end (nats)",
    ]
    rows = []
    for mode, arm in summary["arms"].items():
        seeds = ", ".join("?" if s is None else str(s) for s in arm["seeds"])
        plain = lambda key, digits=2: format_stat(arm[key], percent=False, digits=digits)  # noqa: E731
        rows.append(
            [
                mode,
                f"{arm['runs']} ({seeds})",
                format_stat(arm["base"]),
                format_stat(arm["best"]),
                format_stat(arm["mean"]),
                format_stat(arm["gain_best"]),
                format_stat(arm["gain_mean"]),
                format_stat(arm["complexity_slope"], percent=False, digits=3),
                format_stat(arm["validity"]),
                format_stat(arm["solve_rate"]),
                plain("coverage", 1),
                f"{plain('entropy_start')} → {plain('entropy_end')}",
            ]
        )
    return header, rows


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.9em}th,td{border:1px solid #ccc;padding:4px 8px;text-align:left}
th{background:#f0f0f0}figure{margin:2em 0}img{max-width:100%;border:1px solid #eee}figcaption{color:#444}
.missing{color:#a33}"""


def _page(runs: list[RunData], summary: dict, figures: list[tuple[str, Path | None, str]]) -> str:
    run_rows = [
        [
            str(r.path),
            r.mode,
            r.task,
            "?" if r.seed is None else str(r.seed),
            str(r.steps),
            "finished" if r.finished else "unfinished",
            "; ".join(r.missing) or "-",
        ]
        for r in runs
    ]
    parts = [
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>evolora report</title>'
        f"<style>{_STYLE}</style></head><body>",
        "<h1>evolora report</h1>",
        f"<p>{len(runs)} run(s); arms: {html.escape(', '.join(summary['arms']))}; "
        f"tasks: {html.escape(', '.join(sorted({r.task for r in runs})))}. "
        "Source: PopuLoRA (arXiv 2605.16727) §4.</p>",
        "<h2>Runs</h2>",
        _table(["run directory", "mode", "task", "seed", "steps", "status", "missing"], run_rows),
        "<h2>Summary per arm</h2>",
        _table(*summary_rows(summary)),
        "<p>Held-out accuracy in % of problems; [low, high] is a 95 % Student-t interval over seeds "
        "(shown when an arm has at least two runs with the number; clipped to 0-100 % for rates). "
        "The best member is chosen on the held-out set itself (an optimistic upper bound); the "
        "member mean averages the students of a "
        "population or the single agent (in runs with <code>eval.members: fittest</code>, both are the one "
        "student evaluated, chosen by its fitness). The slope is the least-squares trend of the mean "
        f"{html.escape(summary['complexity_metric'] or 'complexity')} of valid proposals per training step.</p>",
    ]
    paired = summary.get("paired")
    if paired:
        metric = summary["complexity_metric"] or "complexity"
        parts += [
            "<h3>Population − single agent, paired by seed</h3>",
            _table(
                [
                    "seeds",
                    "held-out member mean (points)",
                    "held-out best member (points)",
                    f"{metric} slope (per step)",
                ],
                [
                    [
                        ", ".join(map(str, paired["seeds"])),
                        format_stat(paired["mean"]),
                        format_stat(paired["best"]),
                        format_stat(paired["complexity_slope"], percent=False, digits=3),
                    ]
                ],
            ),
            "<p>Differences per seed (same seed: same base model and held-out items), mean and 95 % "
            "Student-t interval; an interval that contains 0 shows no difference at this sample size.</p>",
        ]
    unevaluated = [r for r in runs if not r.finished]
    if unevaluated:
        names = ", ".join(html.escape(str(r.path)) for r in unevaluated)
        parts.append(
            f'<p class="missing">Held-out accuracy is missing for {names}: no final/summary.json '
            "(the run is unfinished; `evolora evolve --resume` completes it).</p>"
        )
    parts.append("<h2>Figures</h2>")
    number = 0
    for name, path, caption in figures:
        if path is None:
            why = MISSING.get(name, "missing data in these runs")
            parts.append(f'<p class="missing">{html.escape(name)}: not drawn, {html.escape(why)}.</p>')
            continue
        number += 1
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(
            f'<figure id="{html.escape(name)}"><img alt="{html.escape(name)}" '
            f'src="data:image/png;base64,{data}"><figcaption>Figure {number}. '
            f"{html.escape(caption)}</figcaption></figure>"
        )
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_report(run_dirs: Iterable[str | Path | RunData], out_dir: str | Path | None = None) -> Path:
    """Write the figures, ``report.json`` (the :func:`summarize` dict) and ``report.html``.

    Args:
        run_dirs: run directories (or already loaded :class:`RunData`), finished or not; runs
            are grouped into arms by ``selfplay.mode``, seeds of one arm aggregated.
        out_dir: where to write (created); default ``<first run>/report``.

    Returns:
        The path of the self-contained HTML page (every PNG embedded as a base64 data URI).

    Raises:
        ValueError: no run given, or a directory is not a run directory.
        FileNotFoundError: a run directory does not exist.

    Source: PopuLoRA (arXiv 2605.16727) §4.
    """
    runs = [r if isinstance(r, RunData) else load_run(r) for r in run_dirs]
    if not runs:
        raise ValueError("write_report: give at least one run directory")
    out = Path(out_dir) if out_dir is not None else runs[0].path / "report"
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(runs)
    figures = []
    for name, plot, caption in (*FIGURES, BREEDING_FIGURE):
        png = plot(runs, out / f"{name}.png")
        if png is None:
            (out / f"{name}.png").unlink(missing_ok=True)  # no stale figure from an earlier report
        figures.append((name, png, caption))
    write_json_atomic(
        out / REPORT_JSON,
        {
            "runs": [
                {
                    "path": str(r.path),
                    "mode": r.mode,
                    "task": r.task,
                    "seed": r.seed,
                    "steps": r.steps,
                    "finished": r.finished,
                    "missing": r.missing,
                }
                for r in runs
            ],
            **summary,
            "breeding": breeders_summary(breeders_rows(runs)),
        },
    )
    page = out / REPORT_HTML
    write_text_atomic(page, _page(runs, summary, figures))
    return page
