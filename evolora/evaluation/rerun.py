"""Evaluate a finished run's adapters again: more held-out problems, or a newer grader.

    evaluate_run("runs/arith-s0", limit=90)     # rewrites final/summary.json's held-out numbers
    evaluate_run("runs/arith-s0", limit=450, overrides=["task.params.eval_per_cell=50"],
                 out="runs/arith-s0-grid450")   # a larger grid, as a new record

The run's own ``config.yaml`` rebuilds the task and the base model; the students (or the
single agent) are read back from ``final/<id>/`` (PEFT adapter directories) into one
routed adapter bank, and every member and the base are evaluated greedily in one batched
stream, as at the end of a run. Source: PopuLoRA (arXiv 2605.16727) §4 (greedy pass@1 of
every member against the base).
"""

from __future__ import annotations

import json
import time
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from evolora.config import load_run_config
from evolora.evaluation.members import fittest
from evolora.game import MEMBER_ROLES
from evolora.io import write_json_atomic
from evolora.run_dir import final_step

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM, Tokenizer


def _check_run(run_dir: Path, limit: int | None, *, allow_stale: bool = False) -> tuple[Path, list[str], dict]:
    """(summary path, member ids, summary) of a finished run; errors say what is missing, and
    :func:`evolora.run_dir.final_step` refuses a ``final/`` older than the newest checkpoint
    (unless ``allow_stale``); the step of ``final/`` is ``summary["steps"]``."""
    summary_path = run_dir / "final" / "summary.json"
    for path in (run_dir / "config.yaml", summary_path):
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} does not exist; give a finished run directory (evolora evolve ... --out DIR)"
            )
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    summary = json.loads(summary_path.read_text())
    members = [i["id"] for i in summary["individuals"] if i["role"] in MEMBER_ROLES]
    if not members:
        raise ValueError(f"{summary_path} lists no student or agent to evaluate")
    final_step(run_dir, summary, allow_stale=allow_stale)
    return summary_path, members, summary  # the adapter directories are checked by load_members


UNUSED_SLOT = "unused"
"""The slot of a base-only bank (:func:`load_members` with no members)."""


def load_members(
    run_dir: str | Path,
    members: list[str],
    *,
    model: CausalLM | None = None,
    tokenizer: Tokenizer | None = None,
    num_threads: int | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> tuple:
    """A finished run's ``members`` (ids saved in ``final/<id>/``) in one routed adapter bank.

    The run's ``config.yaml`` rebuilds the task and, unless ``model`` and ``tokenizer`` are
    given, the base (``num_threads``: default the run's ``model.num_threads``). ``overrides`` are
    ``--set KEY=VALUE`` strings applied to that config first (e.g. a task parameter to evaluate under).

    Returns:
        (config, task, tokenizer, :class:`evolora.bank.local.AdapterBank` with a slot per member;
        with no members, one unused zero slot, so the bank still serves the bare base ``"__base__"``).

    Raises:
        FileNotFoundError: no ``config.yaml``, or a member's adapter directory is missing.
        ConfigError: an override is malformed or gives an invalid value (the message names the key).
    """
    from evolora.bank.from_config import bank_from_config
    from evolora.tasks import make_task

    run_dir = Path(run_dir)
    config = load_run_config(run_dir, overrides)
    for member in members:
        if not (run_dir / "final" / member).is_dir():
            raise FileNotFoundError(f"{run_dir / 'final' / member} does not exist; the run's adapters are missing")
    task = make_task(config.task.name, **config.task.params)
    if model is None:
        from evolora.model import load_base

        threads = config.model.num_threads if num_threads is None else num_threads
        model, tokenizer = load_base(
            config.model.name,
            dtype=config.model.dtype,
            num_threads=threads,
            device=config.model.device,
            prepack=config.model.prepack,
        )
    slots = list(members) or [UNUSED_SLOT]  # a bank needs a slot; "__base__" rows never read it
    bank = bank_from_config(model, tokenizer, slots, config)
    for member in members:
        bank.load_adapter(member, run_dir / "final" / member)
    return config, task, tokenizer, bank


def evaluate_run(
    run_dir: str | Path,
    *,
    limit: int | None = None,
    model: CausalLM | None = None,
    tokenizer: Tokenizer | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    out: str | Path | None = None,
    allow_stale: bool = False,
) -> dict:
    """Re-run held-out evaluation of a finished run and update ``final/summary.json``.

    The evaluation is the run's own (:func:`evolora.evaluation.held_out_accuracy`, with the
    run's ``eval`` section, on the engine of ``generation.engine``), unless ``limit`` or ``overrides`` change it.

    Args:
        run_dir: a run directory with ``config.yaml`` and ``final/summary.json``.
        limit: held-out problems per member (>= 1); default the run's ``eval.limit``.
        model, tokenizer: an already loaded base model (else loaded from the run's config).
        overrides: ``--set KEY=VALUE`` strings for the evaluation, e.g. a larger held-out grid
            (``task.params.eval_per_cell=50``); they need ``out``, so the run's own record keeps
            the config it was measured under.
        out: write the new record into this directory instead (``config.yaml`` with the overrides,
            ``metrics.jsonl`` copied, ``final/summary.json`` and ``final/held_out.jsonl``); the run
            directory is left as it is. The adapters stay in ``run_dir``. It must not exist, or be a
            directory that holds no run's files (:func:`evolora.run_dir.check_out`).
        allow_stale: evaluate ``final/`` even when a checkpoint is newer (see
            :func:`evolora.run_dir.final_step`).

    Returns:
        The held-out results, ``{member id or "base": {"correct", "total", "accuracy"}}``;
        accuracy is a fraction in [0, 1]. The summary's ``held_out``, ``held_out_source``, each
        member's ``held_out`` and ``held_out_eval`` (limit, items, seconds, time, overrides) are
        rewritten atomically (``held_out_eval["adapters_step"]``: the step of the adapters read); the
        previous numbers move to ``held_out_previous``.
        ``final/held_out.jsonl`` (every answer) is replaced by this evaluation's.

    Raises:
        FileNotFoundError: no ``config.yaml``, ``final/summary.json`` or adapter directory.
        StaleFinal: a checkpoint is newer than ``final/`` and ``allow_stale`` is false.
        ValueError: ``limit`` < 1, overrides without ``out``, ``out`` equal to ``run_dir``, an ``out``
            that is a file or holds another run's files (:class:`evolora.run_dir.OutRefused`), the
            task has no held-out data, or the summary has no student or agent.
        RunDirLocked: another process holds the lock of ``run_dir`` or ``out``: the run's lock is
            held from the first read of ``final/`` to the last write (and ``out``'s too).
        ConfigError: an override is malformed or invalid (the message names the key).
    """
    from evolora.run_dir import lock_run_dir

    run_dir = Path(run_dir)
    _check_run(run_dir, limit, allow_stale=allow_stale)  # nothing is created for a path that is no run
    record_dir = _record_dir(run_dir, overrides, out)
    with lock_run_dir(run_dir), lock_run_dir(record_dir) if record_dir != run_dir else nullcontext():
        _record_dir(run_dir, overrides, out)  # again under the locks: a run may have been written there meanwhile
        return _evaluate_locked(
            run_dir,
            record_dir,
            limit=limit,
            model=model,
            tokenizer=tokenizer,
            overrides=overrides,
            allow_stale=allow_stale,
        )


def _evaluate_locked(
    run_dir: Path,
    record_dir: Path,
    *,
    limit,
    model: CausalLM | None,
    tokenizer: Tokenizer | None,
    overrides,
    allow_stale,
) -> dict:
    """The body of :func:`evaluate_run`, run while this process holds the locks of ``run_dir`` and ``record_dir``."""
    from evolora.evaluation.held_out import held_out_accuracy

    summary_path, members, summary = _check_run(run_dir, limit, allow_stale=allow_stale)

    if load_run_config(run_dir, overrides).eval.members == "fittest":
        members = [_fittest(summary, members)]

    config, task, tokenizer, bank = load_members(
        run_dir, members, model=model, tokenizer=tokenizer, overrides=overrides
    )
    (record_dir / "final").mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    eval_config = config.eval.model_copy(update={"enabled": True})
    held_out, items = held_out_accuracy(
        bank,
        tokenizer,
        task,
        {m: m for m in members},
        eval_config,
        seed=config.run.seed,
        limit=limit or config.eval.limit,
        answers_path=record_dir / "final" / "held_out.jsonl",
    )
    task.close()
    if not held_out:
        raise ValueError(f"task {config.task.name!r} has no held-out data with these parameters")
    summary["held_out_previous"] = summary.get("held_out")
    summary["held_out"] = held_out
    summary["held_out_members"] = config.eval.members
    summary["held_out_source"] = task.held_out_source
    summary["held_out_eval"] = {
        "adapters_step": summary["steps"],
        "limit": limit or config.eval.limit,
        "items": items,
        "overrides": list(overrides),
        "seconds": round(time.perf_counter() - began, 1),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    for individual in summary["individuals"]:
        if individual["role"] in MEMBER_ROLES:  # a member left out (eval.members: fittest) keeps no older number
            individual["held_out"] = held_out.get(individual["id"])
    if record_dir != run_dir:
        _write_record(run_dir, record_dir, config)
    write_json_atomic(record_dir / "final" / "summary.json", summary)
    return held_out


def _fittest(summary: dict, members: list[str]) -> str:
    """The member of ``members`` with the highest fitness in the run's summary (its ``fitness`` record;
    μ − 3σ when the run recorded none, e.g. ``--no-eval``): ``eval.members: fittest``."""
    record = summary.get("fitness") or {}
    if not all(m in record.get("members", {}) for m in members):
        record = {"members": {i["id"]: {"fitness": i["conservative"]} for i in summary["individuals"]}}
    return fittest(record, members)


def _record_dir(run_dir: Path, overrides, out) -> Path:
    """Where the new record goes: ``run_dir``, or ``out`` (required with overrides, never ``run_dir``)."""
    if out is None:
        if overrides:
            raise ValueError("evaluating under --set writes a new record: give --out DIR (the run keeps its own)")
        return run_dir
    from evolora.run_dir import check_out

    out = Path(out)
    if out.resolve() == run_dir.resolve():
        raise ValueError(f"--out {out} is the run directory itself; give a new directory, or leave --out off")
    return check_out(out, then="give a new directory for this record (the run keeps its own)")


def _write_record(run_dir: Path, out: Path, config) -> None:
    """The copy's config (overrides applied) and the run's training metrics, next to its summary."""
    from evolora.config import dump_config
    from evolora.io import write_text_atomic

    write_text_atomic(out / "config.yaml", dump_config(config))
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        write_text_atomic(out / "metrics.jsonl", metrics.read_text())
