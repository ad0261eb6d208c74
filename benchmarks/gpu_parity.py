"""The parity checks of ``gpu_step.py``: the static prefill against the eager one, and the wired Triton
path against the torch path, each on one random-weight model through the graph engine (run as a part
of ``python benchmarks/gpu_step.py``; not a script of its own)."""

from __future__ import annotations

import torch
from gpu_speed import make_bank, random_shaped, rows  # benchmarks/gpu_speed.py (scripts run from benchmarks/)

GREEDY_STEPS = 16
"""Greedy tokens per row compared by each check (min = max: no row ends early)."""


def _mixed_rows(shapes: dict, family: str, device: torch.device, dtype: torch.dtype, batch: int, prompt: int):
    """(bank, names, ids, attention): a random ``family`` model of ``shapes`` with its bank, every fifth of
    ``batch`` rows on the bare base and the others spread over the adapters, ``prompt``-token prompts.
    TF32 off, so fp32 paths can be compared token for token."""
    torch.backends.cuda.matmul.allow_tf32 = False
    bank = make_bank(random_shaped(str(device), dtype, shapes, family))
    names = [bank.slots[i % len(bank.slots)] if i % 5 else "__base__" for i in range(batch)]
    ids, attention = rows(bank.model.config.vocab_size, batch, prompt, device)
    return bank, names, ids, attention


def _greedy(engine, ids: torch.Tensor, attention: torch.Tensor, names: list[str]) -> torch.Tensor:
    """The engine's :data:`GREEDY_STEPS` greedy tokens per row, (B, GREEDY_STEPS)."""
    from evolora.generation.types import Sampling

    sampling = Sampling(max_new_tokens=GREEDY_STEPS, greedy=True)
    return engine.decode(
        ids, attention, names, sampling, eos_ids={1}, pad_id=0, generator=None, min_new_tokens=GREEDY_STEPS
    )


def prefill_parity(
    shapes: dict, family: str, device: torch.device, batch: int, failures: list, sizes: tuple[int, int]
) -> None:
    """The static prefill against the eager one on one random model, the engine's own backend: max |Δ|
    of the first token's logits and the graph engine's greedy tokens over 16 steps; fp32 (TF32 off)
    tokens must be equal, bf16 printed. ``sizes``: (prompt tokens, attention window)."""
    from evolora.generation.graph import GraphDecoder

    prompt, window = sizes
    for dtype in (torch.float32, torch.bfloat16):
        bank, names, ids, attention = _mixed_rows(shapes, family, device, dtype, batch, prompt)
        logits, out = {}, {}
        for static in (True, False):
            engine = GraphDecoder(bank, static_prefill=static)
            with torch.no_grad():
                logits[static] = engine._prefill(engine._buffers_for(batch, window), ids, attention, names, batch)
            out[static] = _greedy(engine, ids, attention, names)
        gap = (logits[True].float() - logits[False].float()).abs().max().item()
        same = (out[True] == out[False]).float().mean().item()
        print(
            f"  static vs eager prefill, {dtype}, {batch} rows: logits max |Δ| {gap:.2e}, "
            f"greedy tokens over {GREEDY_STEPS} steps {same:.2%} equal",
            flush=True,
        )
        if dtype == torch.float32 and same < 1.0:
            failures.append(f"fp32 greedy tokens after the static prefill differ ({same:.2%} equal)")


def wired_parity(
    shapes: dict, family: str, device: torch.device, batch: int, failures: list, sizes: tuple[int, int], pieces: dict
) -> None:
    """The wired Triton path against the torch path on one random model: fp32 (TF32 off) greedy tokens of
    the graph engine equal over 16 steps; bf16 tokens printed. ``pieces``: the :class:`StaticWeights`
    switches of the fused pieces; ``sizes``: (prompt tokens, attention window)."""
    from evolora.generation.graph import GraphDecoder
    from evolora.generation.static_step import StaticWeights

    for dtype in (torch.float32, torch.bfloat16):
        bank, names, ids, attention = _mixed_rows(shapes, family, device, dtype, batch, sizes[0])
        out = {}
        for backend in ("torch", "triton"):
            engine = GraphDecoder(bank)
            engine.weights = StaticWeights(bank, kernels=backend, **pieces)
            out[backend] = _greedy(engine, ids, attention, names)
        same = (out["torch"] == out["triton"]).float().mean().item()
        print(
            f"  wired Triton vs torch path, {dtype}, {batch} rows x {GREEDY_STEPS} greedy tokens: {same:.2%} equal",
            flush=True,
        )
        if dtype == torch.float32 and same < 1.0:
            failures.append(f"fp32 greedy tokens of the wired Triton path differ ({same:.2%} equal)")
