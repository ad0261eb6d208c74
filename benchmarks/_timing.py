"""Timing helper shared by the benchmark scripts (run as ``python benchmarks/NAME.py``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], repeats: int, *, warmup: bool = True) -> float:
    """Median wall-clock seconds of ``repeats`` calls of ``fn`` (after one untimed call if ``warmup``)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def update_bank(model, slots: list[str]):
    """An :class:`evolora.bank.local.AdapterBank` of ``slots`` on ``model`` (rank 8, alpha 16, every
    Llama projection) with factors drawn from one seeded generator: the bank of the update benchmarks."""
    import torch

    from evolora.bank.local import AdapterBank

    bank = AdapterBank(
        model,
        slots,
        rank=8,
        alpha=16,
        target_modules=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    )
    generator = torch.Generator().manual_seed(0)
    for slot in bank.slots:
        bank.init_factors(slot, generator, b_std=0.001)
    return bank


def interleaved_updates(
    bank, data: dict, switch: Callable[[bool], None], *, repeats: int, micro_batch: int
) -> tuple[dict, dict, dict]:
    """``policy_update_many`` over the same ``data`` ({slot: samples}) with a learner setting off and
    on (``switch(on)`` sets it), interleaved ``repeats`` times, lr 0 so the factors never change.

    Returns:
        ({on: wall seconds per repeat}, {on: this process's CPU seconds per repeat},
        {on: {slot: gradient norm of the last repeat}}), keyed by False / True.
    """
    from evolora import learner

    times: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}
    norms: dict[bool, dict[str, float]] = {}
    for _ in range(repeats):
        for on in (False, True):
            switch(on)
            jobs = {
                slot: (learner.make_optimizer(bank.parameters(slot), lr=0.0, weight_decay=0.0), data[slot])
                for slot in bank.slots
            }
            start, start_cpu = time.perf_counter(), time.process_time()
            results = learner.policy_update_many(bank, jobs, micro_batch=micro_batch)
            times[on].append(time.perf_counter() - start)
            cpu[on].append(time.process_time() - start_cpu)
            norms[on] = {slot: result.grad_norm for slot, result in results.items()}
    return times, cpu, norms
