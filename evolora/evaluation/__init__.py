"""Held-out evaluation: greedy accuracy of adapters (and the bare base) on a task's test set.

Every (adapter, problem) pair goes into one mixed-adapter batch stream, so evaluating
P adapters costs about one pass of P × N rows, not P model reloads.
Source: PopuLoRA (arXiv 2605.16727) §4 (greedy pass@1 of every member vs the base).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
import random
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from evolora.bank import Bank
from evolora.generation import heap
from evolora.io import write_text_atomic
from evolora.generation.rollout import chat_prompt, generate
from evolora.generation.routed import BASE
from evolora.tasks.base import HeldOutItem, Task

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM, Tokenizer


@dataclass(frozen=True)
class EvalResult:
    """Accuracy of one adapter: ``correct`` of ``total`` problems (accuracy in [0, 1]); per item,
    in the order evaluated, its greedy answer (``texts``) and grade label (``labels``, e.g.
    ``"correct"``, ``"wrong"``, ``"format"``)."""

    adapter: str
    correct: int
    total: int
    texts: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else float("nan")


def evaluate(
    model: CausalLM,
    tokenizer: Tokenizer,
    task: Task,
    items: list[HeldOutItem],
    adapters: list[str],
    *,
    max_new_tokens: int,
    batch_size: int | None = 16,
    bank: Bank | None = None,
    rollout=None,
) -> dict[str, EvalResult]:
    """Greedy accuracy of each adapter on ``items``.

    Args:
        model: the PEFT model holding the adapters; ``"__base__"`` in ``adapters`` means the base.
        items: held-out problems, prompted with ``task.held_out_prompt(item)`` and graded with
            ``task.grade_held_out(completions, items)`` (batched; e.g. HumanEval for ``code``).
        adapters: adapter slot names to evaluate.
        max_new_tokens: generation cap per answer.
        batch_size: rows per decode batch; None: the default of ``rollout`` (a bank's engine: by device).
        bank: route rows with :func:`evolora.generation.routed.routed` when given (else PEFT's mixed batches).
        rollout: ``(prompts, adapters, **options) -> completions`` to generate with instead of
            ``model`` (a bank's :meth:`~evolora.bank.local.AdapterBank.rollout`, in-process or on Ray workers).

    Returns:
        {adapter name: EvalResult}.
    """
    prompts = [chat_prompt(tokenizer, task.held_out_prompt(item)) for item in items]
    rows = [(adapter, i) for adapter in adapters for i in range(len(items))]
    heap.trim()  # a run's last update leaves freed blocks in the heap; the KV buffers then add to live memory only
    if rollout is None:
        rollout = partial(generate, model, tokenizer, bank=bank)
    with heap.mapped_blocks():  # the long decode's buffers outside the fragmented heap (evolora.generation.heap)
        completions = rollout([prompts[i] for _, i in rows], [a for a, _ in rows], max_new_tokens=max_new_tokens,
                              greedy=True, **({} if batch_size is None else {"batch_size": batch_size}))
    grades = task.grade_held_out([c.text for c in completions], [items[i] for _, i in rows])
    answers: dict[str, list] = {adapter: [] for adapter in adapters}
    for (adapter, _), completion, grade in zip(rows, completions, grades):
        answers[adapter].append((completion.text, grade.label))
    return {adapter: EvalResult(adapter, sum(label == "correct" for _, label in pairs), len(items),
                                tuple(text for text, _ in pairs), tuple(label for _, label in pairs))
            for adapter, pairs in answers.items()}


__all__ = ["BASE", "EvalResult", "evaluate"]


def held_out_accuracy(bank: Bank, tokenizer: Tokenizer, task: Task, members: dict[str, str], eval_config, *, seed: int,
                      limit: int | None = None,
                      answers_path: str | Path | None = None) -> tuple[dict[str, dict], int]:
    """The one held-out evaluation of a run's members, used at a run's end and by
    :func:`evolora.evaluation.rerun.evaluate_run`.

    Args:
        bank: the :class:`evolora.bank.local.AdapterBank` holding the members.
        members: {bank slot: member id} to evaluate; the base model is added as "base" when
            ``eval_config.base`` is true.
        eval_config: the run's :class:`evolora.config.EvalConfig` (limit, base, max_new_tokens,
            batch_size, enabled).
        seed: the run seed (tasks that sample their held-out set use ``random.Random(seed)``).
        limit: problems per member; default ``eval_config.limit``.
        answers_path: when given, every greedy answer is written there (atomically) as JSON
            lines {"member", "item", "question", "answer", "group", "completion", "grade"}.

    Returns:
        ({member id or "base": {"correct", "total", "accuracy", "items"}}, number of problems); accuracy
        is a fraction in [0, 1]; "items" is per-item correctness, "1"/"0" per item in order. When the items have groups (:class:`evolora.tasks.base.HeldOutItem`)
        each entry also has "by_group": {group: {"correct", "total"}}, groups in item order.
        Empty when evaluation is disabled or the task has no held-out data.
    """
    limit = eval_config.limit if limit is None else limit
    if not eval_config.enabled or limit == 0:
        return {}, 0
    items = task.held_out(limit, random.Random(seed))
    if not items:
        return {}, 0
    names = dict(members)
    if eval_config.base:
        names[BASE] = "base"
    results = evaluate(None, tokenizer, task, items, list(names), max_new_tokens=eval_config.max_new_tokens,
                       batch_size=eval_config.batch_size, rollout=partial(bank.rollout, tokenizer))
    if answers_path is not None:
        write_text_atomic(answers_path, "".join(
            json.dumps({"member": names[slot], "item": i, "question": item.question, "answer": item.answer,
                        "group": item.group, "completion": text, "grade": label}) + "\n"
            for slot, r in results.items() for i, (item, text, label) in enumerate(zip(items, r.texts, r.labels))))
    return {names[slot]: _record(r, items) for slot, r in results.items()}, len(items)


def _record(result: EvalResult, items: list[HeldOutItem]) -> dict:
    """One member's held-out entry: {"correct", "total", "accuracy", "items"}, and "by_group" when the
    items have groups. "items" holds per-item correctness in item order, one character each
    ("1" correct, "0" not), for item-level intervals (:func:`evolora.report.stats.bootstrap_difference`)."""
    record = {"correct": result.correct, "total": result.total, "accuracy": result.accuracy,
              "items": "".join("1" if label == "correct" else "0" for label in result.labels)}
    if any(item.group is not None for item in items):
        groups: dict[str, dict[str, int]] = {}
        for item, label in zip(items, result.labels):
            group = groups.setdefault(str(item.group), {"correct": 0, "total": 0})
            group["correct"] += label == "correct"
            group["total"] += 1
        record["by_group"] = groups
    return record
