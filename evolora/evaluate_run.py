"""Evaluate a finished run's adapters again: more held-out problems, or a newer grader.

    evaluate_run("runs/arith-s0", limit=90)     # rewrites final/summary.json's held-out numbers

The run's own ``config.yaml`` rebuilds the task and the base model; the students (or the
single agent) are read back from ``final/<id>/`` (PEFT adapter directories) into one
routed adapter bank, and every member and the base are evaluated greedily in one batched
stream, as at the end of a run. Source: PopuLoRA (arXiv 2605.16727) §4 (greedy pass@1 of
every member against the base).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from evolora.config import load_run_config
from evolora.io import write_json_atomic

MEMBER_ROLES = ("student", "agent")


def evaluate_run(run_dir: str | Path, *, limit: int | None = None, model=None, tokenizer=None) -> dict:
    """Re-run held-out evaluation of a finished run and update ``final/summary.json`` in place.

    Args:
        run_dir: a run directory with ``config.yaml`` and ``final/summary.json``.
        limit: held-out problems per member (>= 1); default the run's ``eval.limit``.
        model, tokenizer: an already loaded base model (else loaded from the run's config).

    Returns:
        The held-out results, ``{member id or "base": {"correct", "total", "accuracy"}}``;
        accuracy is a fraction in [0, 1]. The summary's ``held_out``, each member's
        ``held_out`` and ``held_out_eval`` (limit, items, seconds, time) are rewritten
        atomically; the previous numbers move to ``held_out_previous``.

    Raises:
        FileNotFoundError: no ``config.yaml``, ``final/summary.json`` or adapter directory.
        ValueError: ``limit`` < 1, the task has no held-out data, or the summary has no
            student or agent.
    """
    run_dir = Path(run_dir)
    summary_path = run_dir / "final" / "summary.json"
    for path in (run_dir / "config.yaml", summary_path):
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist; give a finished run directory (evolora evolve ... --out DIR)")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    config = load_run_config(run_dir)
    summary = json.loads(summary_path.read_text())
    members = [i["id"] for i in summary["individuals"] if i["role"] in MEMBER_ROLES]
    if not members:
        raise ValueError(f"{summary_path} lists no student or agent to evaluate")
    for member in members:
        if not (run_dir / "final" / member).is_dir():
            raise FileNotFoundError(f"{run_dir / 'final' / member} does not exist; the run's adapters are missing")

    from evolora.evaluation import BASE, evaluate
    from evolora.population import AdapterBank
    from evolora.tasks import make_task

    task = make_task(config.task.name, **config.task.params)
    items = task.held_out(limit or config.eval.limit, random.Random(config.run.seed))
    if not items:
        raise ValueError(f"task {config.task.name!r} has no held-out data with these parameters")
    if model is None:
        from evolora.model import load_base

        model, tokenizer = load_base(config.model.name, dtype=config.model.dtype, num_threads=config.model.num_threads)
    lora = config.lora
    bank = AdapterBank(model, members, rank=lora.rank, alpha=lora.alpha, target_modules=lora.target_modules)
    for member in members:
        bank.load_adapter(member, run_dir / "final" / member)
    began = time.perf_counter()
    results = evaluate(bank.model, tokenizer, task, items, members + [BASE], max_new_tokens=config.eval.max_new_tokens,
                       batch_size=config.eval.batch_size, bank=bank)
    seconds = time.perf_counter() - began
    held_out = {("base" if slot == BASE else slot): {"correct": r.correct, "total": r.total, "accuracy": r.accuracy}
                for slot, r in results.items()}
    summary["held_out_previous"] = summary.get("held_out")
    summary["held_out"] = held_out
    summary["held_out_source"] = getattr(task, "held_out_source", None)
    summary["held_out_eval"] = {"limit": limit or config.eval.limit, "items": len(items), "seconds": round(seconds, 1),
                                "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    for individual in summary["individuals"]:
        if individual["id"] in held_out:
            individual["held_out"] = held_out[individual["id"]]
    write_json_atomic(summary_path, summary)
    close = getattr(task, "close", None)
    if callable(close):
        close()
    return held_out
