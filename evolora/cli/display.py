"""What the command line shows during a run: third-party noise off, and a first line that says
what is about to happen.

Only the CLI calls these: the library itself never changes global warning filters or logging.
"""

from __future__ import annotations

import errno
import os
import re
import sys

import typer
from rich.console import Console
from rich.markup import escape

from evolora.config import Config

console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
"""The command line's console for progress, notes and errors (stderr; stdout carries results)."""


def start_line(config: Config, out, *, resume: bool) -> str:
    """One line: model (and whether it is converted first), task, population, steps, the outer loop's
    operators (:func:`evolution_words`), run directory."""
    from evolora.model import needs_conversion

    players = (
        "1 single agent (proposes and solves)"
        if config.selfplay.mode == "single_agent"
        else " + ".join(f"{n} {role}{'s' * (n != 1)}" for role, n in config.role_sizes.items())
    )
    model = config.model.name
    if needs_conversion(model):
        model += " (first run: converting the embedded GGUF once, ~20 s)"
    if config.run.backend == "local":
        from evolora.model.device import resolve_device
        from evolora.model.dtype import resolve_dtype

        device = str(resolve_device(config.model.device))
        model += f" ({device}, {resolve_dtype(config.model.dtype, device)})"
    verb = "resuming" if resume else "starting"
    where = (
        f", {config.run.workers} Ray worker{'s' * (config.run.workers > 1)}"
        f" ({config.run.ray_address or 'local cluster'})"
        if config.run.backend == "ray"
        else ""
    )
    return (
        f"evolora: {verb} {players} on {model}{where}, task {config.task.name}, "
        f"{config.run.steps} steps, {evolution_words(config)} -> {out}"
    )


def evolution_words(config: Config) -> str:
    """The outer loop in words: how often it runs and its selection, crossover and mutation with
    their parameters as resolved (defaults filled in, None left out), then each role's own
    (``evolution.roles``) and a parent sampling other than the default, or ``"no evolution"``."""
    from evolora.config.operator_choice import LOOP_KINDS

    if not (config.arm.evolve and config.evolution.enabled):
        return "no evolution"
    named = [_operator_words(kind, getattr(config.evolution, kind)) for kind in LOOP_KINDS]
    for role, own in config.evolution.roles.items():
        named += [f"{role} {_operator_words(kind, getattr(own, kind))}" for kind in LOOP_KINDS if getattr(own, kind)]
    if config.evolution.sampling != "independent":
        named.append(f"parents by {config.evolution.sampling} sampling")
    return f"evolving every {config.evolution.every} steps by " + ", ".join(named)


def _operator_words(kind: str, choice) -> str:
    """``selection tournament(k=3, replace=True)``: an operator choice with its resolved parameters."""
    from evolora.operators import REGISTRY

    params = REGISTRY.validate(kind, choice.name, choice.params)
    shown = ", ".join(f"{key}={value}" for key, value in params.items() if value is not None)
    return f"{kind} {choice.name}" + (f"({shown})" if shown else "")


def selection_note(config: Config) -> str | None:
    """A note when ``evolution.selection`` reads per-case scores (lexicase) that the run's fitness does
    not record (only ``evolution.fitness: exam`` does); else None."""
    from evolora.operators import REGISTRY

    evo = config.evolution
    if not (config.arm.evolve and evo.enabled) or evo.fitness.name == "exam":
        return None
    choices = [evo.selection, *(own.selection for own in evo.roles.values() if own.selection)]
    reading = next((c.name for c in choices if REGISTRY.get("selection", c.name).takes_cases), None)
    if reading is None:
        return None
    return (
        f"evolution.selection {reading} reads per-problem outcomes (cases), which only "
        f"evolution.fitness: exam records; with {evo.fitness.name!r} it gets none and selects on the "
        "fitness alone (--set evolution.fitness=exam)"
    )


def critic_table(critic_eval: dict):
    """The held-out critic evaluation (``summary.json``'s ``critic_eval``) as a rich table: per judge its
    balanced accuracy, verdict parse rate and AUC; per answerer greedy, single-sample, majority-of-n,
    best-of-n by each judge and top-of-n by each judge's verdict score (accuracies in %)."""
    from rich.table import Table

    n, judges = critic_eval["n"], list(critic_eval["judges"])
    table = Table(title=f"held-out critic evaluation ({critic_eval['problems']} problems, n = {n})")
    scored = [
        j for j in judges if all(j in row.get("best_of_n_score", {}) for row in critic_eval["answerers"].values())
    ]
    for column in (
        "answerer",
        "greedy",
        "single",
        f"majority@{n}",
        *(f"best@{n} by {j}" for j in judges),
        *(f"top@{n} by {j}" for j in scored),
    ):
        table.add_column(column)
    pct = lambda x: f"{x:.1%}" if x is not None else "-"  # noqa: E731
    for name, row in critic_eval["answerers"].items():
        table.add_row(
            name,
            pct(row["greedy"]),
            pct(row["single"]),
            pct(row["majority"]),
            *(pct(row["best_of_n"][j]) for j in judges),
            *(pct(row["best_of_n_score"][j]) for j in scored),
        )
    table.caption = "balanced accuracy of each judge: " + "; ".join(
        f"{j} {pct(s['balanced_accuracy'])} (parsed {pct(s['parse_rate'])} of {s['reviews']}"
        + (f", AUC {s['auc']:.3f})" if s.get("auc") is not None else ")")
        for j, s in critic_eval["judges"].items()
    )
    return table


def warn(message: str) -> None:
    """Print ``message`` as one warning line on stderr."""
    console.print(f"[yellow]warning:[/] {escape(message)}", highlight=False, soft_wrap=True)


OS_ERRORS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("no space left on the device", "make room"),
    errno.EDQUOT: ("disk quota exceeded", "free some of your quota (or ask for a larger one)"),
    errno.EFBIG: (
        "file too large for the file-size limit",
        "raise the limit (ulimit -f unlimited) or choose a file system that takes larger files",
    ),
    errno.EACCES: (
        "permission denied",
        "give your user write access to the folder (chmod, chown) or choose another one",
    ),
    errno.EPERM: (
        "operation not permitted",
        "give your user write access to the folder (chmod, chown) or choose another one",
    ),
    errno.EROFS: ("the file system is read-only", "remount it read-write (or copy the folder to a writable one)"),
    errno.EIO: (
        "input/output error (a failing disk, or a network file system gone away)",
        "check the disk and its mount (dmesg, fsck) before writing there again",
    ),
}
"""OSError number -> (what happened, what to do): the errors on a run's files or the caches the command
line reports in one line (exit 2) instead of a traceback."""


def fail(message: str, code: int = 2) -> None:
    """Print ``message`` as one error line on stderr and exit with ``code`` (2: a usage or config error).

    The message is bounded (:func:`bounded`): at most 3 lines and 500 bytes, whatever value it quotes."""
    console.print(
        f"[bold red]error:[/] {escape(bounded(message))}", highlight=False, soft_wrap=True
    )  # e.g. 'evolora[wandb]'
    raise typer.Exit(code)


def os_failure(error: OSError, intact: str, then: str = "run again", *, writing: object = "the output") -> None:
    """Exit 2 with one line for an OSError of :data:`OS_ERRORS`: what happened on ``error.filename``
    (else ``writing``), what is intact, the advice that fits the error, then ``then``; re-raise any
    other OSError.

    Args:
        error: the OSError (its ``errno`` picks the advice).
        intact: what is as it was, e.g. ``"the checkpoint of step 3 is intact"``.
        then: what to do once the advice is followed, e.g. ``"continue with: evolora evolve --resume runs/x"``.
        writing: what was being written when the error names no file.

    For example: ``error: the file system is read-only (runs/x/metrics.jsonl); the checkpoint of step 3
    is intact: remount it read-write (or copy the folder to a writable one), then continue with: ...``
    """
    if error.errno not in OS_ERRORS:
        raise error
    what, advice = OS_ERRORS[error.errno]
    where = str(error.filename or writing)
    from evolora.model import cache_dir  # loaded by now wherever a cache is written

    if where.startswith(str(cache_dir())):
        advice += " (or move evolora's caches with $EVOLORA_CACHE)"
    fail(f"{what} ({where}); {intact}: {advice}, then {then}")


def bounded(message: str, *, lines: int = 3, size: int = 500, word: int = 160) -> str:
    """``message`` with every run of more than ``word`` non-space characters cut in its middle, at most
    ``lines`` lines and ``size`` UTF-8 bytes (the last line says what was left out).

    >>> bounded("x" * 400, word=20)
    'xxxxxxxxxxxx...xxxxx'
    """

    def cut(match) -> str:
        text = match.group()
        return text[: word - 8] + "..." + text[-5:]

    rows = [re.sub(rf"\S{{{word + 1},}}", cut, row) for row in message.splitlines() or [""]]
    if len(rows) > lines:
        rows = rows[: lines - 1] + [f"... ({len(rows) - lines + 1} more lines)"]
    text = "\n".join(rows)
    if len(text.encode()) > size:
        text = text.encode()[: size - 3].decode(errors="ignore") + "..."
    return text


def result_console() -> Console:
    """The console for results on stdout: the terminal's width, or 200 columns when stdout is a pipe or
    a file (CI logs, ``| tee``, nohup), so tables are never cropped to 80 columns. When stdout's reader
    goes away (``| head``), the rest is dropped with one note on stderr and the caller goes on
    (:class:`evolora.cli.pipe.ResultStream`)."""
    from evolora.cli.pipe import ResultStream

    stream = ResultStream(say=lambda line: console.print(f"[yellow]note:[/] {line}", highlight=False))
    return Console(file=stream, width=None if sys.stdout.isatty() else max(200, int(os.environ.get("COLUMNS", 0) or 0)))
