"""A run's second held-out set: the teachers' own problem family, beside the task's held-out set.

    record = family_accuracy(bank, tokenizer, task, {slot: member id}, config.eval,
                             exclude=set(run.memory.answers), answers_path=out / "final" / "held_out_family.jsonl")

The main held-out set measures transfer (GSM8K's test for ``gsm``), which a small model may never
move; the family set (``task.family_held_out``, e.g. :mod:`evolora.tasks.gsm.family`) measures the
skill the run trains, on problems of the teachers' family whose numbers no teacher proposed. The
verdict labels each for what it measures. ``evolora evaluate`` re-runs the main set only; the
summary keeps the run's own family record. Source: PopuLoRA (arXiv 2605.16727) §4 (held-out accuracy
of the members against the base); the family set is evolora's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from evolora.evaluation.held_out import held_out_accuracy

if TYPE_CHECKING:
    from evolora.bank import Bank
    from evolora.hf_types import Tokenizer
    from evolora.tasks.base import Task

FAMILY_SEED = 0
"""The family draw's seed: every run of a config meets the same items (apart from its exclusions),
so runs pair item by item."""


def family_accuracy(
    bank: Bank,
    tokenizer: Tokenizer,
    task: Task,
    members: dict[str, str],
    eval_config,
    *,
    exclude: set[str],
    answers_path: str | Path | None = None,
    before_batch: Callable[[], None] | None = None,
) -> dict:
    """Greedy accuracy of ``members`` (and the base when ``eval_config.base``) on the family set.

    Args:
        members: {bank slot: member id}, as :func:`evolora.evaluation.held_out_accuracy`.
        eval_config: the run's :class:`evolora.config.EvalConfig`; ``family`` items are drawn (0: none).
        exclude: normalised texts of the problems proposed in the run (they are never family items).
        answers_path: every greedy answer, as JSON lines (as the main held-out set's).
        before_batch: called before each decode batch (:func:`evolora.evaluation.held_out.evaluate`).

    Returns:
        {} when evaluation is off (``enabled`` false or ``limit`` 0), ``eval_config.family`` is 0 or the
        task has no family set; else
        {"source": what the set measures, "items": n, "excluded": draws skipped as proposed,
        "held_out": {member id or "base": {"correct", "total", "accuracy", "items", "by_group"}}}.
    """
    if not eval_config.enabled or eval_config.limit == 0 or eval_config.family == 0:
        return {}  # eval.limit 0 turns the held-out evaluation off, the family set with it
    drawn = task.family_held_out(eval_config.family, FAMILY_SEED, exclude)
    if drawn is None or not drawn[0]:
        return {}
    items, excluded = drawn
    records, n = held_out_accuracy(
        bank,
        tokenizer,
        task,
        members,
        eval_config,
        seed=FAMILY_SEED,
        items=items,
        answers_path=answers_path,
        before_batch=before_batch,
    )
    return {"source": task.family_source, "items": n, "excluded": excluded, "held_out": records}
