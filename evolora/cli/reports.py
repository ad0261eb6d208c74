"""The command line's report commands: figures and one HTML page over run directories
(``evolora report``), and a summary table per arm (``evolora compare``).

Registered on the app by :mod:`evolora.cli`; ``evolora study`` calls them at its end.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from evolora.cli.display import console, fail, result_console


def _check_writable(out: Path) -> None:
    """Exit 2 with one line when ``out`` cannot be created or written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{os.getpid()}"  # per process: two on one directory never unlink each other's
        probe.write_text("ok")
        probe.unlink()
    except OSError as error:
        fail(f"cannot write to output directory {out}: {error.strerror}; choose another with --out")


def _study_tables(out: Path, reference: str) -> None:
    """Write the study's tables (``tables.md``, each arm against ``reference``) and figures (``arms.png``;
    ``pass_at_k.png`` once a run has a sampled evaluation) over every run directory in ``out`` (earlier
    invocations' arms and seeds included)."""
    from evolora.report.data import load_run
    from evolora.report.study_figures import write_study_report
    from evolora.report.study_tables import study_tables

    runs = [load_run(p) for p in sorted(out.iterdir()) if (p / "config.yaml").is_file()]
    tables = study_tables(runs, reference=reference)
    if tables.by_arm:
        write_study_report(tables, runs, out / "report")
        console.print(f"study tables: {out / 'report' / 'tables.md'}", highlight=False)


def _write_report(run_dirs: list[Path], out: Optional[Path]):
    """Load the runs and write the report under its folder's lock; bad paths, an ``--out`` that is a
    file or another run, and a folder another process is writing exit 2 naming the path.

    The report writes only its own folder (default ``<first run>/report``, which no other command
    writes), so a run still in progress can be reported: the lock is the report folder's, not the run's."""
    from evolora.report import write_report
    from evolora.report.data import load_run
    from evolora.run_dir import RunDirLocked, check_out, lock_run_dir

    try:
        if out is not None:
            check_out(out, then="give a report folder of its own (default <first run>/report)")
        runs = [load_run(path) for path in run_dirs]
    except (FileNotFoundError, ValueError) as error:  # OutRefused is a ValueError
        fail(str(error))
    out = out if out is not None else run_dirs[0] / "report"
    _check_writable(out)
    try:
        with lock_run_dir(out):
            return runs, write_report(runs, out)
    except RunDirLocked as error:
        fail(str(error))


def report(
    run_dirs: list[Path] = typer.Argument(..., metavar="RUN_DIR", help="Run directories (finished or not)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Report directory (default <first run>/report)."),
) -> None:
    """Write PNG figures and one self-contained HTML page over run directories; print its path."""
    _, page = _write_report(run_dirs, out)
    typer.echo(str(page))


def compare(
    run_dirs: list[Path] = typer.Argument(..., metavar="RUN_DIR", help="Two or more run directories."),
    out: Optional[Path] = typer.Option(None, "--out", help="Report directory (default <first run>/report)."),
) -> None:
    """Compare arms (population vs single agent) over seeds: print a summary table and write the report."""
    from evolora.report import format_stat, summary_rows
    from evolora.report.data import summarize

    if len(run_dirs) < 2:
        fail(f"compare needs at least two run directories, got {len(run_dirs)}; use `evolora report` for one")
    runs, page = _write_report(run_dirs, out)
    summary = summarize(runs)
    header, rows = summary_rows(summary)
    table = Table(title=f"summary per arm, {len(runs)} runs (mean [95% t-interval] over seeds)")
    for column in header:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    paired = summary["paired"]
    if paired:
        table.caption = (
            f"population − single agent, paired by seed {paired['seeds']}: member mean "
            f"{format_stat(paired['mean'])}, best {format_stat(paired['best'])}, complexity slope "
            f"{format_stat(paired['complexity_slope'], percent=False, digits=3)}"
        )
    result_console().print(table)
    typer.echo(str(page))
