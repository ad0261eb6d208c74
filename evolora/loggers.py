"""Experiment trackers for a run: JSON lines (always), TensorBoard, Weights & Biases.

    run:
      loggers: [jsonl, tensorboard, wandb]     # config key; default [jsonl]

Every logger is a step callback ``logger(run, record, games)`` (see :mod:`evolora.callbacks`)
with a ``close(summary)``; :func:`open_loggers` builds the configured ones for a run
directory and :data:`LOGGERS` is the registry a new tracker plugs into. Each step is logged
at its global step (``record["step"]``, 1-based), so a resumed run continues the same curves:

* ``jsonl``: ``RUN_DIR/metrics.jsonl`` and ``matches.jsonl``; :func:`evolora.run_dir.repair_logs`
  drops the records after the checkpoint a run resumes from.
* ``tensorboard``: event files under ``RUN_DIR/tensorboard/`` written by
  ``torch.utils.tensorboard.SummaryWriter``; a resumed writer opens with
  ``purge_step = checkpoint step + 1``, so TensorBoard hides the events the interrupted
  process wrote after its last checkpoint and shows every step once.
* ``wandb``: one W&B run per run directory (its id is kept in ``RUN_DIR/wandb/run_id``,
  resumed with ``resume="allow"``), ``dir=RUN_DIR``, offline unless ``WANDB_MODE`` says
  otherwise; its config is the run directory's ``config.yaml``. W&B keeps the first value it
  receives for a step: a resume replays the steps after the checkpoint deterministically
  (see :mod:`evolora.run`), so the curves agree.

What is logged per step (tags of :func:`scalars`): mean reward per role, validity, solve and
format-error rates, each member's rating μ and μ − 3σ (PopuLoRA (arXiv 2605.16727) §2: the
conservative rating ranks members for selection and replacement) and Elo, policy loss and
entropy per member, proposal complexity, coverage (distinct problem signatures so far),
tokens and tokens/s, seconds per phase, peak RSS, and the births of the step as text.
"""

from __future__ import annotations

import math
import os
import secrets
from pathlib import Path
from typing import Any, Callable

from evolora.callbacks import JsonlLogger


class LoggerError(RuntimeError):
    """A configured tracker could not start; the message names it and what to do."""


def _put(out: dict[str, float], tag: str, value: Any) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        out[tag] = float(value)


def scalars(record: dict) -> dict[str, float]:
    """The numbers of one metrics record (:meth:`evolora.run.Run.run_step`) as ``{tag: value}``.

    Tags: ``reward/{teacher,student}`` (mean reward), ``rate/{validity,solve,format_error}``
    (fractions in [0, 1]), ``rating_mu/<id>``, ``rating_conservative/<id>`` (μ − 3σ),
    ``elo/<id>``, ``loss/<id>``, ``entropy/<id>`` (nats per token) and ``entropy/mean``,
    ``complexity/<stat>``, ``coverage`` (distinct problem signatures so far),
    ``throughput/{tokens,tokens_per_second}``, ``seconds/<phase>``, ``births`` (count) and
    ``memory/peak_rss_mb``. Missing (None) and non-finite values are left out.
    """
    out: dict[str, float] = {}
    for role, value in record.get("reward", {}).items():
        _put(out, f"reward/{role}", value)
    for name in ("validity", "solve", "format_error"):
        _put(out, f"rate/{name}", record.get(f"{name}_rate"))
    for member, rating in record.get("ratings", {}).items():
        _put(out, f"rating_mu/{member}", rating["mu"])
        _put(out, f"rating_conservative/{member}", rating["mu"] - 3 * rating["sigma"])
        _put(out, f"elo/{member}", rating.get("elo"))
    for member, value in record.get("loss", {}).items():
        _put(out, f"loss/{member}", value)
    for member, value in record.get("entropy", {}).items():
        _put(out, f"entropy/{member}", value)
    _put(out, "entropy/mean", record.get("mean_entropy"))
    for stat, value in (record.get("complexity") or {}).items():
        _put(out, f"complexity/{stat}", value)
    _put(out, "coverage", record.get("coverage"))
    _put(out, "throughput/tokens", record.get("tokens"))
    _put(out, "throughput/tokens_per_second", record.get("tokens_per_second"))
    for phase, value in record.get("seconds", {}).items():
        _put(out, f"seconds/{phase}", value)
    _put(out, "births", len(record.get("births", [])))
    _put(out, "memory/peak_rss_mb", record.get("peak_rss_mb"))
    return out


BIRTH_COLUMNS = ("child", "replaced", "role", "operator", "parents")


def births_markdown(births: list[dict]) -> str | None:
    """The step's births as a Markdown table (child, replaced, role, operator, parents); None if none."""
    if not births:
        return None
    rows = [
        f"| {b['child']} | {b['replaced']} | {b['role']} | {b['operator']} | {', '.join(b['parents'])} |"
        for b in births
    ]
    return "\n".join(["| " + " | ".join(BIRTH_COLUMNS) + " |", "|" + "---|" * len(BIRTH_COLUMNS), *rows])


def held_out_scalars(summary: dict | None) -> dict[str, float]:
    """``{"held_out/<id or base>": accuracy}`` (fractions in [0, 1]) of a run's final summary."""
    out: dict[str, float] = {}
    for name, result in ((summary or {}).get("held_out") or {}).items():
        _put(out, f"held_out/{name}", result.get("accuracy"))
    return out


class _Jsonl(JsonlLogger):
    """:class:`evolora.callbacks.JsonlLogger` with the logger interface's ``close``."""

    def __init__(self, run_dir: Path, start_step: int):
        super().__init__()

    def close(self, summary: dict | None = None) -> None:
        """Nothing to flush: every record is fsynced when written."""


class TensorBoardLogger:
    """Write each step's :func:`scalars` and births to ``RUN_DIR/tensorboard/`` event files.

    Args:
        run_dir: the run directory.
        start_step: the step the run (re)starts from (>= 0); the writer purges events at steps
            > ``start_step`` left by an interrupted process (``purge_step = start_step + 1``).

    Raises:
        ImportError: the ``tensorboard`` package is missing (``pip install 'evolora[tensorboard]'``).
    """

    def __init__(self, run_dir: Path, start_step: int = 0):
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(run_dir) / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=start_step + 1)

    def __call__(self, run, record: dict, games: list) -> None:
        for tag, value in scalars(record).items():
            self.writer.add_scalar(tag, value, record["step"])
        text = births_markdown(record.get("births", []))
        if text:
            self.writer.add_text("births", text, record["step"])
        self.writer.flush()

    def close(self, summary: dict | None = None) -> None:
        """Log the final held-out accuracies (at the last step) and close the event file."""
        for tag, value in held_out_scalars(summary).items():
            self.writer.add_scalar(tag, value, summary["steps"])
        self.writer.close()


class WandbLogger:
    """Log each step's :func:`scalars` and births to a Weights & Biases run in ``RUN_DIR/wandb/``.

    The W&B config is ``RUN_DIR/config.yaml``; the mode is ``WANDB_MODE`` or ``offline``
    (upload later with ``wandb sync RUN_DIR/wandb/offline-run-*``); the project is
    ``WANDB_PROJECT`` or ``evolora``; the run id is kept in ``RUN_DIR/wandb/run_id`` so a
    resume continues the same W&B run.

    Args:
        run_dir: the run directory (its ``config.yaml`` must exist).
        start_step: the step the run (re)starts from (>= 0); only for the registry's signature:
            every record is logged at its own global step.

    Raises:
        ImportError: the ``wandb`` package is missing (``pip install 'evolora[wandb]'``).
    """

    def __init__(self, run_dir: Path, start_step: int = 0):
        import wandb
        import yaml

        from evolora.io import write_text_atomic

        run_dir = Path(run_dir)
        id_path = run_dir / "wandb" / "run_id"
        if id_path.is_file():
            run_id = id_path.read_text().strip()
        else:
            run_id = secrets.token_hex(4)  # 8 characters of [0-9a-f], a valid W&B run id
            id_path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(id_path, run_id + "\n")
        self.wandb = wandb
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "evolora"),
            name=run_dir.name,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            mode=os.environ.get("WANDB_MODE", "offline"),
            config=yaml.safe_load((run_dir / "config.yaml").read_text()),
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True),
        )

    def __call__(self, run, record: dict, games: list) -> None:
        data: dict[str, Any] = dict(scalars(record))
        if record.get("births"):
            rows = [[b[c] if c != "parents" else ", ".join(b[c]) for c in BIRTH_COLUMNS] for b in record["births"]]
            data["births_table"] = self.wandb.Table(columns=list(BIRTH_COLUMNS), data=rows)
        self.run.log(data, step=record["step"])

    def close(self, summary: dict | None = None) -> None:
        """Log the final held-out accuracies (at the last step) and finish the W&B run; without a
        summary (an interrupted run, to be resumed) it finishes with exit code 1."""
        held = held_out_scalars(summary)
        if held:
            self.run.log(held, step=summary["steps"])
        self.run.finish(exit_code=0 if summary is not None else 1)


LOGGERS: dict[str, Callable[[Path, int], Any]] = {
    "jsonl": _Jsonl,
    "tensorboard": TensorBoardLogger,
    "wandb": WandbLogger,
}
"""Logger name (a ``run.loggers`` value) -> ``factory(run_dir, start_step)``; a new tracker
adds an entry here, to ``RunConfig.loggers``' names and, if it needs a package, to
:data:`OPTIONAL_PACKAGES` and the pyproject extras."""


def open_loggers(names: tuple[str, ...], run_dir: str | Path, *, start_step: int = 0) -> list:
    """Build the loggers ``names`` for ``run_dir``, in the given order.

    Args:
        names: validated ``config.run.loggers``.
        run_dir: the run directory (``config.yaml`` already written by :class:`evolora.run.Run`).
        start_step: the step the run starts from: 0, or the checkpoint step it resumed at.

    Returns:
        Step callbacks, each with ``close(summary=None)``; close them with :func:`close_loggers`.

    Raises:
        KeyError: an unknown name (validated configs never hold one).
        LoggerError: a tracker failed to start (e.g. ``WANDB_MODE=online`` without a W&B login);
            the loggers opened before it are closed.
    """
    opened, name = [], None
    try:
        for name in names:
            opened.append(LOGGERS[name](Path(run_dir), start_step))
    except BaseException as error:
        close_loggers(opened)
        if isinstance(error, Exception) and not isinstance(error, KeyError):
            raise LoggerError(
                f"cannot start the {name} logger ({type(error).__name__}: {error}); fix it, "
                f"or leave {name} out of run.loggers"
            ) from error
        raise
    return opened


def close_loggers(loggers: list, summary: dict | None = None) -> None:
    """Close every logger, passing the run's final summary (held-out accuracies) when it has one.

    Raises:
        Exception: the first error a logger's ``close`` raised, after every logger was closed.
    """
    errors = []
    for logger in loggers:
        try:
            logger.close(summary)
        except Exception as error:  # close the others first
            errors.append(error)
    if errors:
        raise errors[0]
