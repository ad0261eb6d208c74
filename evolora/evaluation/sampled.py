"""Sampled pass@k on the held-out set, for a finished run's members and the base.

    record = sampled_pass_at_k("runs/arith-s0", samples=16, ks=(1, 4, 16))
    record["members"]["base"]["pass@16"]     # written into final/summary.json as "pass_at_k"

Greedy accuracy (:mod:`evolora.evaluation.rerun`) says what a member answers; pass@k over n
sampled answers per problem says what it can reach. RL with verifiable rewards mostly sharpens
what the base already samples, so the base's pass@k is a rough ceiling for a run's greedy gains,
and a member's pass@k against the base's shows whether training widened the solvable set.
Estimator: 1 − C(n − c, k) / C(n, k) per problem, averaged (Chen et al., arXiv 2107.03374, §2.1;
:func:`pass_at_k`). Source: PopuLoRA (arXiv 2605.16727) §4 (held-out evaluation).
"""

from __future__ import annotations

import math
import random
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from evolora.bank import Bank
from evolora.generation.rollout import chat_prompt
from evolora.generation.routed import BASE
from evolora.generation.types import Sampling
from evolora.io import write_json_atomic
from evolora.tasks.base import HeldOutItem, Task

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM, Tokenizer

DEFAULT_KS = (1, 4, 16)
"""The k of pass@k reported by default (k > n samples are left out)."""


def correct_counts(
    bank: Bank,
    tokenizer: Tokenizer,
    task: Task,
    items: list[HeldOutItem],
    slots: list[str],
    *,
    samples: int,
    temperature: float,
    max_new_tokens: int,
    batch_size: int,
    seed: int,
    greedy: bool = False,
) -> dict[str, list[int]]:
    """Per slot (or ``"__base__"``), the number of correct answers among ``samples`` sampled ones
    for each item: {slot: [c_0, ..., c_{N-1}]}, each in [0, samples]. Each slot draws from its own
    generator, seeded from ``(seed, slot name)`` (:func:`slot_seed`), so a slot's samples do not
    depend on which other slots are evaluated with it: the base draws the same answers in every
    run's evaluation, and a call replays exactly. ``greedy``: argmax answers instead
    (``temperature`` ignored; with ``samples=1`` the counts are the greedy correct flags)."""
    prompts = [chat_prompt(tokenizer, task.held_out_prompt(item)) for item in items]
    sampling = Sampling(max_new_tokens=max_new_tokens, greedy=greedy, temperature=temperature, stop=task.answer_stop)
    counts = {}
    for slot in slots:
        rows = [i for i in range(len(items)) for _ in range(samples)]
        generator = torch.Generator(device="cpu").manual_seed(slot_seed(seed, slot))  # the bank moves it to its device
        done = bank.rollout(
            [prompts[i] for i in rows], [slot] * len(rows), sampling, batch_size=batch_size, generator=generator
        )
        grades = task.grade_held_out([c.text for c in done], [items[i] for i in rows])
        counts[slot] = [0] * len(items)
        for i, grade in zip(rows, grades):
            counts[slot][i] += grade.label == "correct"
    return counts


def slot_seed(seed: int, slot: str) -> int:
    """The sampling seed of one slot's rows: a function of ``(seed, slot name)`` only (CRC-32 of
    ``"<seed>:<slot>"``), so a slot draws the same noise whatever is evaluated beside it.

    >>> slot_seed(0, "__base__") == slot_seed(0, "__base__") != slot_seed(1, "__base__")
    True
    """
    return zlib.crc32(f"{seed}:{slot}".encode())


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 − C(n − c, k) / C(n, k), in [0, 1]
    (Chen et al. 2021, arXiv 2107.03374 §2.1).

    Raises:
        ValueError: unless 0 <= c <= n and 1 <= k <= n.
    """
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_k_record(counts: list[int], samples: int, ks: tuple[int, ...]) -> dict[str, float]:
    """{"pass@k": mean over problems of the unbiased estimate} for each k <= ``samples``, in [0, 1].

    Raises:
        ValueError: no problems, or a count outside [0, samples].
    """
    if not counts:
        raise ValueError("pass@k needs at least one problem")
    return {f"pass@{k}": sum(pass_at_k(samples, c, k) for c in counts) / len(counts) for k in ks if k <= samples}


def check_options(samples: int, temperature: float, ks: tuple[int, ...]) -> None:
    """Refuse impossible options before anything loads (ValueError names the option and what is allowed)."""
    if samples < 1:
        raise ValueError(f"--samples must be >= 1, got {samples}")
    if not temperature > 0:
        raise ValueError(f"--temperature must be > 0, got {temperature}")
    if not ks or min(ks) < 1 or min(ks) > samples:
        raise ValueError(
            f"--k needs at least one value in 1..{samples} (the samples; larger k are left out), got {list(ks)}"
        )


def sampled_pass_at_k(
    run_dir: str | Path,
    *,
    samples: int,
    ks: tuple[int, ...] = DEFAULT_KS,
    temperature: float = 1.0,
    limit: int | None = None,
    seed: int = 0,
    model: CausalLM | None = None,
    tokenizer: Tokenizer | None = None,
    allow_stale: bool = False,
    base: dict | None = None,
) -> dict:
    """pass@k of a finished run's members and the base on its held-out set; written to the summary.

    Args:
        run_dir: a finished run (``config.yaml``, ``final/summary.json``, ``final/<id>/``).
        samples: n sampled answers per problem and member (>= 1); ks: the k reported (<= n).
        temperature: sampling temperature (> 0); limit: held-out problems (default ``eval.limit``);
        seed: the sampling generator's seed; model, tokenizer: an already loaded base.
        base: the base's entry of an earlier record with the same options, items and model dtype
            (the base draws the same answers in every run, :func:`correct_counts`): copied, not sampled again.

    Returns:
        ``{"samples", "temperature", "limit", "seed", "seconds", "members": {id or "base":
        {"pass@k": float, ..., "correct_counts": [int per problem]}}}``, also stored as
        ``final/summary.json["pass_at_k"]`` (atomically).

    Raises:
        FileNotFoundError: the run is not finished or an adapter directory is missing.
        ValueError: bad options (:func:`check_options`) or no held-out data.
        RunDirLocked: another process holds the run directory's lock (it is held from the first
            read of ``final/`` to the summary's write).
    """
    from evolora.evaluation.rerun import _check_run
    from evolora.run_dir import lock_run_dir

    check_options(samples, temperature, ks)
    _check_run(Path(run_dir), limit, allow_stale=allow_stale)  # nothing is created for a path that is no run
    with lock_run_dir(run_dir):
        return _sampled_locked(
            run_dir,
            samples=samples,
            ks=ks,
            temperature=temperature,
            limit=limit,
            seed=seed,
            model=model,
            tokenizer=tokenizer,
            allow_stale=allow_stale,
            base=base,
        )


def _sampled_locked(
    run_dir,
    *,
    samples,
    ks,
    temperature,
    limit,
    seed,
    model: CausalLM | None,
    tokenizer: Tokenizer | None,
    allow_stale,
    base,
) -> dict:
    """The body of :func:`sampled_pass_at_k`, run while this process holds the run directory's lock."""
    from evolora.evaluation.rerun import _check_run, load_members

    summary_path, members, summary = _check_run(Path(run_dir), limit, allow_stale=allow_stale)
    config, task, tokenizer, bank = load_members(run_dir, members, model=model, tokenizer=tokenizer)
    limit = limit or config.eval.limit
    items = task.held_out(limit, random.Random(config.run.seed))
    if not items:
        raise ValueError(f"task {config.task.name!r} has no held-out data with these parameters")
    began = time.perf_counter()
    counts = correct_counts(
        bank,
        tokenizer,
        task,
        items,
        [*members] + ([] if base else [BASE]),
        samples=samples,
        temperature=temperature,
        max_new_tokens=config.eval.max_new_tokens,
        batch_size=config.eval.batch_size,
        seed=seed,
    )
    task.close()
    record = {
        "samples": samples,
        "temperature": temperature,
        "limit": len(items),
        "seed": seed,
        "seconds": round(time.perf_counter() - began, 1),
        "members": {
            ("base" if slot == BASE else slot): {**pass_at_k_record(c, samples, ks), "correct_counts": c}
            for slot, c in counts.items()
        },
    }
    if base:
        record["members"]["base"] = dict(base)
    summary["pass_at_k"] = record
    write_json_atomic(summary_path, summary)
    return record
