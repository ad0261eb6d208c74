"""The table a finished run prints: each member's rating, record and held-out accuracy with its
95 % interval, the in-run trends, the critics' table and the run's verdict."""

from __future__ import annotations

from rich.table import Table

from evolora.cli.display import result_console


def print_summary(summary: dict) -> None:
    """The final table (held-out accuracy with its 95 % interval and n), the in-run trends and the verdict."""
    from evolora.report.stats import fixed  # here, not at import: scipy would slow every command's start

    verdict = summary.get("verdict") or {"held_out": {}, "trend": {}, "sentence": ""}
    table = Table(title=f"population after {summary['steps']} steps")
    family = verdict.get("family", {}).get("held_out", {})
    for column in (
        "id",
        "role",
        "μ ± σ",
        "μ−3σ",
        "Elo",
        "W/L/D",
        "solve/valid",
        "born",
        "held-out [95 %], n",
        *(["family [95 %], n"] if family else []),
    ):
        table.add_column(column, overflow="fold")
    for row in summary["individuals"]:
        table.add_row(
            row["id"],
            row["role"],
            f"{fixed(row['mu'])} ± {fixed(row['sigma'])}",  # one decimal, never a negative zero
            fixed(row["conservative"]),
            f"{row['elo']:.0f}",
            f"{row['wins']}/{row['losses']}/{row['draws']}",
            f"{row['solve_or_valid_rate']:.0%}" if row["solve_or_valid_rate"] is not None else "-",
            f"{row['operator']}@{row['born_step']}",
            _accuracy(verdict["held_out"].get(row["id"])),
            *([_accuracy(family.get(row["id"]))] if family else []),
        )
    if "base" in verdict["held_out"]:
        table.caption = (
            f"base model held-out accuracy: {_accuracy(verdict['held_out']['base'])}; "
            f"held-out problems: {summary.get('held_out_source') or 'the task'}"
            + (f"; base on the family: {_accuracy(family.get('base'))}" if family else "")
        )
    console = result_console()
    console.print(table)
    if verdict["trend"]:
        trend = Table(title="in-run trend (mean of the first and last fifth of the steps)")
        for column in ("", "first", "last"):
            trend.add_column(column, overflow="fold")
        for name, (first, last) in verdict["trend"].items():
            trend.add_row(name, *(f"{v:.2f}" if v is not None else "-" for v in (first, last)))
        console.print(trend)
    if summary.get("critic_eval"):
        from evolora.cli.display import critic_table

        console.print(critic_table(summary["critic_eval"]))
    for sentence in (verdict["sentence"], verdict.get("family", {}).get("sentence"), verdict.get("in_run")):
        if sentence:
            console.print(sentence, highlight=False)


def _accuracy(held: dict | None) -> str:
    """``12.5 % [4.3, 31.0], n=16`` (or ``-``)."""
    if not held:
        return "-"
    return f"{100 * held['accuracy']:.1f} % [{100 * held['low']:.1f}, {100 * held['high']:.1f}], n={held['n']}"
