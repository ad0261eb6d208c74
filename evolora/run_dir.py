"""One process per run directory, and logs that agree with the checkpoint a run resumes from.

* :func:`lock_run_dir` takes an exclusive ``fcntl`` lock on ``RUN_DIR/.lock``: a second
  process on the same directory gets :class:`RunDirLocked` naming the PID that holds it. The
  kernel releases the lock when the holder exits, however it exits (SIGKILL included).
* :func:`check_out` refuses an ``--out`` that is an existing file, or a directory holding a run's
  files (:data:`RUN_MARKERS`), before any work: no command writes into another run.
* :func:`repair_logs` makes ``metrics.jsonl`` and ``matches.jsonl`` hold exactly the steps up
  to the checkpoint's: records after it are dropped (the resumed run writes them again), a
  torn last line is dropped, duplicated steps keep their first copy, and a corrupt line in the
  middle is dropped with a warning instead of taking every later record with it.
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from evolora.io import atomic_path

LOCK = ".lock"
LOGS = ("metrics.jsonl", "matches.jsonl")


RUN_MARKERS = ("config.yaml", "metrics.jsonl", "matches.jsonl", "checkpoints", "final/summary.json")
"""Paths (relative to a directory) that mark it as a run directory, or the record of ``evolora evaluate --out``."""


class RunDirLocked(RuntimeError):
    """Another live process holds the run directory's lock."""


class OutRefused(ValueError):
    """An ``--out`` path that is an existing file, or a directory that holds a run's files."""


def run_marker(path: str | Path) -> str | None:
    """The first of :data:`RUN_MARKERS` that ``path`` holds, or None (also for a path that is no directory)."""
    path = Path(path)
    if not path.is_dir():
        return None
    return next((marker for marker in RUN_MARKERS if (path / marker).exists()), None)


def check_out(out: str | Path, *, option: str = "--out", then: str = "give a new directory") -> Path:
    """Refuse an output directory that would write into another run, before any work.

    Args:
        out: the directory a command is about to write (absent, or an empty or unrelated directory).
        option: how the message names it (``--out``).
        then: what the message tells the user to do instead.

    Returns:
        ``out`` as a :class:`~pathlib.Path`.

    Raises:
        OutRefused: ``out`` exists and is not a directory, or holds a run's files
            (:data:`RUN_MARKERS`); the one-line message names the path and the file.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutRefused(f"{option} {out} is an existing file, not a directory; {then}")
    marker = run_marker(out)
    if marker is not None:
        raise OutRefused(f"{option} {out} holds another run's files ({marker}); {then}")
    return out


@contextmanager
def lock_run_dir(run_dir: str | Path) -> Iterator[Path]:
    """Hold an exclusive lock on ``run_dir`` for the duration of the ``with`` block.

    Raises:
        RunDirLocked: another process holds it; the message names its PID.
        OSError: the directory cannot be created or written.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    handle = open(run_dir / LOCK, "a+")
    try:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise RunDirLocked(
                f"{run_dir} is in use by process {holder}; wait for it to end or stop it "
                f"(kill {holder}), then run again"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        yield run_dir
    finally:
        handle.close()  # closing the descriptor releases the lock


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def _parse_lines(text: str, name: str) -> tuple[list[dict], list[str]]:
    """Records of the JSON-lines text of file ``name`` and warnings; a torn last line is dropped silently."""
    lines = text.split("\n")
    torn = lines.pop()  # "" when the file ends with a newline, else a partial last line
    records, problems = [], []
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            problems.append(f"{name}:{number} is not a step record; dropped")
            continue
        records.append(record)
    if torn.strip():
        try:
            record = json.loads(torn)
            if isinstance(record, dict) and isinstance(record.get("step"), int):
                records.append(record)  # complete, only its newline is missing
        except json.JSONDecodeError:
            pass
    return records, problems


def _games_per_step(metrics: list[dict]) -> dict[int, int]:
    """Games each step played, from its metrics record ("games", else the verdict counts)."""
    counts = {}
    for record in metrics:
        games = record.get("games")
        if not isinstance(games, int) and isinstance(record.get("verdicts"), dict):
            games = sum(v for v in record["verdicts"].values() if isinstance(v, int))
        if isinstance(games, int):
            counts.setdefault(record["step"], games)
    return counts


def _keep(records: list[dict], step: int, per_step: dict[int, int] | None) -> list[dict]:
    """Records of steps ``<= step``, each step once: metrics (``per_step`` None) keep the first
    record of a step; matches keep a step's first ``per_step[s]`` records, and when that count
    is unknown only its first contiguous block."""
    kept, taken, closed, current = [], {}, set(), None
    for record in records:
        s = record["step"]
        if s != current and current is not None:
            closed.add(current)
        current = s
        limit = 1 if per_step is None else per_step.get(s)
        if s > step or (s in closed and limit is None) or (limit is not None and taken.get(s, 0) >= limit):
            continue
        taken[s] = taken.get(s, 0) + 1
        kept.append(record)
    return kept


def repair_logs(run_dir: str | Path, step: int) -> list[str]:
    """Make the run's logs hold exactly steps ``1..step``, each once, in order of writing.

    Args:
        run_dir: the run directory.
        step: the step of the checkpoint the run resumes from (>= 0).

    Returns:
        Warnings for the user: corrupt lines dropped, and steps missing from ``metrics.jsonl``
        (lost before this resume; they are not run again).
    """
    run_dir = Path(run_dir)
    warnings, per_step = [], None
    for name in LOGS:  # metrics first: it says how many games each step's matches hold
        path = run_dir / name
        if not path.exists():
            continue
        original = _read(path)
        records, problems = _parse_lines(original, name)
        warnings.extend(problems)
        kept = _keep(records, step, (per_step or {}) if name == "matches.jsonl" else None)
        if name == "metrics.jsonl":
            per_step = _games_per_step(kept)
        text = "".join(json.dumps(r) + "\n" for r in kept)
        if text != original:
            with atomic_path(path) as tmp:
                tmp.write_text(text, encoding="utf-8")
        if name == "metrics.jsonl":
            missing = sorted(set(range(1, step + 1)) - {r["step"] for r in kept})
            if missing:
                warnings.append(f"metrics.jsonl has no record of steps {missing} (lost before this resume)")
    return warnings


def log_counts(run_dir: str | Path) -> dict[str, int]:
    """Records in each log now: {"metrics": n, "matches": m}."""
    return {name.split(".")[0]: len(_parse_lines(_read(Path(run_dir) / name), name)[0]) for name in LOGS}


class StaleFinal(ValueError):
    """``final/`` holds older adapters than the run's newest checkpoint (a resume stopped before its end)."""


def final_step(run_dir: str | Path, summary: dict, *, allow_stale: bool = False) -> int:
    """The step of the adapters in ``RUN_DIR/final/`` (``summary["steps"]``), checked against the
    newest checkpoint ``RUN_DIR/checkpoints/step_NNNNNN``.

    A run that finished at step S, was resumed for more steps and stopped before its new end keeps
    ``final/`` from step S while its checkpoints hold step S' > S: exporting or evaluating
    ``final/`` then reads adapters older than the run's newest, so it is refused unless
    ``allow_stale``.

    Returns:
        The step of ``final/`` (>= 0).

    Raises:
        StaleFinal: a checkpoint is newer than ``final/`` and ``allow_stale`` is false; the message
            names both steps and the two ways on (finish the run, or ``--stale-ok``).
        ValueError: the summary records no step.
    """
    step = summary.get("steps")
    if not isinstance(step, int) or isinstance(step, bool):
        raise ValueError(
            f"{Path(run_dir) / 'final' / 'summary.json'} records no step; "
            f"write final/ again with: evolora evolve --resume {run_dir}"
        )
    newest = newest_checkpoint_step(run_dir)
    if newest is not None and newest > step and not allow_stale:
        raise StaleFinal(
            f"{run_dir}/final holds the adapters of step {step}, but the run's checkpoints reach step "
            f"{newest} (a resume that stopped before its end): finish it with evolora evolve --resume "
            f"{run_dir}, or add --stale-ok to use step {step}'s adapters"
        )
    return step


def newest_checkpoint_step(run_dir: str | Path) -> int | None:
    """The step of the newest ``RUN_DIR/checkpoints/step_NNNNNN`` by name (intact or not); None when none."""
    return max(
        (int(p.name[5:]) for p in (Path(run_dir) / "checkpoints").glob("step_*") if p.name[5:].isdigit()), default=None
    )


def finished_at(run_dir: str | Path, steps: int) -> int | None:
    """The step a run in ``RUN_DIR`` finished at, when that is ``steps`` or more: ``final/summary.json``
    records it and no checkpoint is newer (:func:`final_step`). None otherwise: no summary, one that
    cannot be read, fewer steps, or a resume that stopped before its new end."""
    try:
        summary = json.loads((Path(run_dir) / "final" / "summary.json").read_text())
        done = final_step(run_dir, summary)
    except (OSError, ValueError, AttributeError):  # absent, unreadable, not a mapping, or stale (StaleFinal)
        return None
    return done if done >= steps else None
