"""Step callbacks: logging to the run directory, checkpointing, a progress bar.

Each is a plain callable ``callback(run, record, games)`` passed to :meth:`Run.train`;
nothing registers itself.
"""

from __future__ import annotations

from statistics import mean

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from evolora.io import append_jsonl

METRICS = "metrics.jsonl"
MATCHES = "matches.jsonl"


class JsonlLogger:
    """Append the step's metrics record to ``metrics.jsonl`` and its games to ``matches.jsonl``."""

    def __call__(self, run, record: dict, games: list) -> None:
        for game in games:
            append_jsonl(run.out_dir / MATCHES, {"step": record["step"], **game.to_dict()})
        append_jsonl(run.out_dir / METRICS, record)
        run.log_counts["matches"] += len(games)
        run.log_counts["metrics"] += 1


class Checkpointer:
    """Write a checkpoint every ``every`` steps and after the last step (place it after the logger)."""

    def __init__(self, every: int, last_step: int):
        self.every = every
        self.last_step = last_step

    def __call__(self, run, record: dict, games: list) -> None:
        if run.step % self.every == 0 or run.step == self.last_step:
            run.save_checkpoint()


class ProgressBar:
    """A rich progress bar: step, ETA, mean reward per role, validity and solve rates.

    Use as a context manager around :meth:`Run.train`. ``console``: where it draws (rich's
    default console when None; the CLI passes a wide one when stdout is not a terminal).
    """

    def __init__(self, total: int, start: int = 0, console=None):
        self.progress = Progress(
            TextColumn("[bold]step"),
            MofNCompleteColumn(),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.description}"),
            console=console,
        )
        self.task = self.progress.add_task("", total=total, completed=start)
        self.rewards: dict[str, list[float]] = {"teacher": [], "student": []}

    def __enter__(self) -> ProgressBar:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def __call__(self, run, record: dict, games: list) -> None:
        parts = []
        for role in ("teacher", "student"):
            value = record["reward"].get(role)
            if value is not None:
                self.rewards[role].append(value)
            shown = f"{mean(self.rewards[role]):+.2f}" if self.rewards[role] else "n/a"
            parts.append(f"R̄ {role[0]} {shown}")
        solve = record["solve_rate"]
        parts.append(f"valid {record['validity_rate']:.0%}")
        parts.append(f"solve {solve:.0%}" if solve is not None else "solve n/a")
        parts.append(f"{record['seconds']['total']:.0f}s/step")
        self.progress.update(self.task, completed=run.step, description="  ".join(parts))
