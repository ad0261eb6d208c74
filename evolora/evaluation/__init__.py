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
from evolora.evaluation.base_cache import base_key, load_base, store_base
from evolora.generation import heap
from evolora.generation.engine import BATCH_SIZE
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
        batch_size: rows per decode batch; None: the default of ``bank``'s engine (by device; 16 without a bank).
            Batches also hold at most :data:`EVAL_POSITIONS_PER_ROW` × that default decoder positions.
        bank: route rows with :func:`evolora.generation.routed.routed` when given and ``rollout`` is not
            (else PEFT's mixed batches); its ``batch_size`` sizes the batches.
        rollout: ``(prompts, adapters, **options) -> completions`` to generate with instead of
            ``model`` (a bank's :meth:`~evolora.bank.local.AdapterBank.rollout`, in-process or on Ray workers).

    Returns:
        {adapter name: EvalResult}.
    """
    prompts = [chat_prompt(tokenizer, task.held_out_prompt(item)) for item in items]  # answers end at task.answer_stop
    rows = [(adapter, i) for adapter in adapters for i in range(len(items))]
    heap.trim()  # a run's last update leaves freed blocks in the heap; the KV buffers then add to live memory only
    if rollout is None:
        rollout = partial(generate, model, tokenizer, bank=bank)
    completions = [None] * len(rows)
    default = bank.batch_size if bank is not None else BATCH_SIZE["cpu"]  # the engine's default for the device
    budget = default * EVAL_POSITIONS_PER_ROW
    for chunk in row_chunks([len(prompts[i]) for _, i in rows], batch_size or default, max_new_tokens, budget):
        with heap.mapped_blocks():  # the long decode's buffers outside the fragmented heap (evolora.generation.heap)
            done = rollout([prompts[rows[r][1]] for r in chunk], [rows[r][0] for r in chunk],
                           max_new_tokens=max_new_tokens, greedy=True, batch_size=len(chunk), stop=task.answer_stop)
        for r, completion in zip(chunk, done):
            completions[r] = completion
        heap.trim()
    grades = task.grade_held_out([c.text for c in completions], [items[i] for _, i in rows])
    answers: dict[str, list] = {adapter: [] for adapter in adapters}
    for (adapter, _), completion, grade in zip(rows, completions, grades):
        answers[adapter].append((completion.text, grade.label))
    return {adapter: EvalResult(adapter, sum(label == "correct" for _, label in pairs), len(items),
                                tuple(text for text, _ in pairs), tuple(label for _, label in pairs))
            for adapter, pairs in answers.items()}


__all__ = ["BASE", "EVAL_POSITIONS_PER_ROW", "EvalResult", "evaluate", "row_chunks"]


EVAL_POSITIONS_PER_ROW = 1024
"""Decoder positions (rows × (longest prompt + ``max_new_tokens``)) one evaluation batch may hold,
per row of the engine's default batch (:data:`evolora.generation.engine.BATCH_SIZE`): 16,384 on a
CPU, 262,144 on a GPU. The batch's prefill activations and KV cache grow with it. On a CPU, gsm's
48 rows (prompts of 68-152 tokens + 192 new) then run in one batch instead of batches of about 20
(at 6,144 positions): side by side, 48 greedy answers of the base (SmolLM2-135M, float32, one
thread) took 0.86x the CPU time, the same 48 texts, with peak RSS 1.68 GB against 1.25 GB
(docs/performance.md)."""


def row_chunks(lengths: list[int], batch_size: int, max_new_tokens: int, budget: int) -> list[list[int]]:
    """Indices of ``lengths`` (prompt tokens per row) in batches, shortest prompts first: each at
    most ``batch_size`` rows and, above one row, at most ``budget`` decoder positions counted as
    rows × (longest prompt of the batch + ``max_new_tokens``).

    >>> row_chunks([10, 300, 20, 30], batch_size=3, max_new_tokens=90, budget=400)
    [[0, 2, 3], [1]]
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    chunks: list[list[int]] = []
    for i in order:
        if chunks:
            chunk = chunks[-1]
            rows = len(chunk) + 1
            if rows <= batch_size and rows * (lengths[i] + max_new_tokens) <= budget:
                chunk.append(i)
                continue
        chunks.append([i])
    return chunks


def held_out_accuracy(bank: Bank, tokenizer: Tokenizer, task: Task, members: dict[str, str], eval_config, *, seed: int,
                      limit: int | None = None, items: list[HeldOutItem] | None = None,
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
        items: evaluate these problems instead of ``task.held_out(limit, ...)`` (e.g. the family set of
            :mod:`evolora.evaluation.family`); ``limit`` is then ignored.
        answers_path: when given, every greedy answer is written there (atomically) as JSON
            lines {"member", "item", "question", "answer", "group", "completion", "grade"}.

    Returns:
        ({member id or "base": {"correct", "total", "accuracy", "items"}}, number of problems); accuracy
        is a fraction in [0, 1]; "items" is per-item correctness, "1"/"0" per item in order; the base's
        entry has "cached": True when its answers came from the cache (``eval.cache_base``,
        :mod:`evolora.evaluation.base_cache`). When
        the items have groups (:class:`evolora.tasks.base.HeldOutItem`)
        each entry also has "by_group": {group: {"correct", "total"}}, groups in item order.
        Empty when evaluation is disabled or the task has no held-out data.
    """
    limit = eval_config.limit if limit is None else limit
    if not eval_config.enabled or (limit == 0 and items is None):
        return {}, 0
    items = task.held_out(limit, random.Random(seed)) if items is None else items
    if not items:
        return {}, 0
    names = dict(members)
    key = cached = None
    if eval_config.base and eval_config.cache_base:
        prompts = [chat_prompt(tokenizer, task.held_out_prompt(item)) for item in items]
        key = base_key(bank, task, items, prompts, eval_config.max_new_tokens, tokenizer=tokenizer)
        cached = load_base(key, len(items))
    if eval_config.base and cached is None:
        names[BASE] = "base"
    results = evaluate(None, tokenizer, task, items, list(names), max_new_tokens=eval_config.max_new_tokens,
                       batch_size=eval_config.batch_size, bank=bank, rollout=partial(bank.rollout, tokenizer)) if names else {}
    if cached is not None:
        texts, labels = cached
        results[BASE] = EvalResult(BASE, labels.count("correct"), len(items), tuple(texts), tuple(labels))
        names[BASE] = "base"
    elif eval_config.base:
        store_base(key, list(results[BASE].texts), list(results[BASE].labels))
    if answers_path is not None:
        write_text_atomic(answers_path, "".join(
            json.dumps({"member": names[slot], "item": i, "question": item.question, "answer": item.answer,
                        "group": item.group, "completion": text, "grade": label}) + "\n"
            for slot, r in results.items() for i, (item, text, label) in enumerate(zip(items, r.texts, r.labels))))
    records = {names[slot]: _record(r, items) for slot, r in results.items()}
    if cached is not None:
        records["base"]["cached"] = True
    return records, len(items)


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


def held_out_curve(run) -> dict[str, float]:
    """One point of a held-out learning curve (``eval.every``) of ``run`` (an :class:`evolora.run.Run`):
    {member id: greedy accuracy in [0, 1]} of its solvers on the first ``eval.curve_limit`` held-out
    items, in one batched call, without the base; {} when the task has no held-out data."""
    solvers = {m.slot: m.id for m in run.population.players(run.arm.game)[1]}
    curve = run.config.eval.model_copy(update={"enabled": True, "base": False})
    results, _ = held_out_accuracy(run.bank, run.tokenizer, run.task, solvers, curve, seed=run.config.run.seed,
                                   limit=curve.curve_limit)
    return {member: entry["accuracy"] for member, entry in results.items()}
