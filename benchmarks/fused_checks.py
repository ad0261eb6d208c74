"""The GPU checks of the decode step's fused SiLU·mul and flash-decode attention (``gpu_kernels.py``
parts 6 and 7): parity against the torch references in fp32 and bf16, and on CUDA the speed and the
kernels per call, both paths captured in a CUDA graph and replayed back to back."""

from __future__ import annotations

import torch

WINDOW, CAPACITY = 256, 512
"""Attended window and cache columns of the attention check."""


def _bf16_parity(name: str, fused: torch.Tensor, truth: torch.Tensor, steps: torch.Tensor, failures: list) -> str:
    """The bf16 parity clause of a check's line: the fused kernel and the torch steps against fp32 of the
    same inputs; a fused result more than one rounding step away is added to ``failures``."""
    within = _one_rounding(fused, truth)
    if not within:
        failures.append(f"{name} bf16: more than one rounding step from fp32")
    return (
        f"; bf16 vs fp32 of the same inputs: fused {(fused - truth).abs().max().item():.2e} "
        f"(one rounding: {within}), torch {(steps - truth).abs().max().item():.2e}"
    )


def _one_rounding(fused: torch.Tensor, truth: torch.Tensor) -> bool:
    """Every value within one bf16 rounding step of the fp32 result (1e-6 for fp32 summation order)."""
    return bool(((fused - truth).abs() <= torch.finfo(torch.bfloat16).eps * truth.abs() + 1e-6).all())


def _speed(calls: dict, replays: int, failures: list, label: str, kernels: int) -> str:
    """µs and kernels per call of each path of ``calls`` ({"torch": fn, "triton": fn}); appends a failure
    when the Triton path launches more than ``kernels`` kernels or is slower than the torch path."""
    from bench_cuda import count_kernels, replay_us

    figures = {path: (replay_us(call, replays)[0], count_kernels(call)) for path, call in calls.items()}
    if figures["triton"][1] != kernels or figures["triton"][0] > figures["torch"][0]:
        failures.append(f"{label}: Triton {figures['triton']} against torch {figures['torch']} (µs, kernels)")
    return "; " + ", ".join(f"{path} {us:.1f} µs ({n} kernels)" for path, (us, n) in figures.items())


def silu_mul_check(module, width: int, rows: int, device, replays: int, failures: list) -> None:
    """silu(gate) · up of a (rows, 2·width) gate/up output: fp32 max |Δ| ≤ 1e-5 against the reference;
    on CUDA, bf16 within one rounding step of the fp32 result, 1 kernel, not slower than the torch path."""
    from evolora.generation.kernels.silu_mul_torch import silu_mul_torch

    y = (torch.randn(rows, 2 * width, generator=torch.Generator().manual_seed(0)) * 2).to(device)
    error = (module.silu_mul(y) - silu_mul_torch(y)).abs().max().item()
    line = f"  SiLU·mul of {width} columns, rows {rows}: fp32 max |Δ| {error:.2e}"
    if error > 1e-5:
        failures.append(f"SiLU·mul fp32 parity {error:.2e}")
    if device.type == "cuda":
        y16 = y.bfloat16()
        truth, fused = silu_mul_torch(y16.float()), module.silu_mul(y16).float()
        steps = silu_mul_torch(y16).float()
        line += _bf16_parity("SiLU·mul", fused, truth, steps, failures)
        out = torch.empty(rows, width, dtype=torch.bfloat16, device=device)
        calls = {"torch": lambda: silu_mul_torch(y16), "triton": lambda: module.silu_mul(y16, out=out)}
        line += _speed(calls, replays, failures, "SiLU·mul", 1)
    print(line, flush=True)


def attention_case(shape: tuple, rows: int, device):
    """q (rows, H_kv, G, D), k and v views of a (rows, H_kv, CAPACITY, D) cache's first WINDOW columns,
    and the static cache's mask: rows left-padded by 0-63 columns, filled to a shared column 199 (the
    engine's layout), except row 0, filled to column 49 (a row of another length)."""
    heads, group, dim = shape
    g = torch.Generator().manual_seed(0)
    q = torch.randn(rows, heads, group, dim, generator=g) * dim**-0.5
    cache = torch.randn(2, rows, heads, CAPACITY, dim, generator=g)
    valid = torch.zeros(rows, WINDOW, dtype=torch.bool)
    for r in range(rows):
        valid[r, (7 * r) % 64 : 50 if r == 0 else 200] = True
    q, cache, valid = q.to(device), cache.to(device), valid.to(device)
    return q, cache[0, :, :, :WINDOW], cache[1, :, :, :WINDOW], valid


def attention_check(module, shape: tuple, rows: int, device, replays: int, failures: list) -> None:
    """The flash-decode attention against the torch path (the whole window, masked): fp32 max |Δ| ≤ 1e-5;
    on CUDA, bf16 within one rounding step of the fp32 result of the same inputs, 1 kernel per layer
    (the bounds and the torch path's mask made once per step, outside the timing), not slower."""
    from evolora.generation.kernels.attention_torch import (
        attend_torch,
        attention_bias,
        decode_attention_torch,
        row_bounds,
    )

    q, k, v, valid = attention_case(shape, rows, device)
    bounds = row_bounds(valid)
    error = module.decode_attention(q, k, v, valid, bounds, 0.125) - decode_attention_torch(q, k, v, valid, 0.125)
    error = error.abs().max().item()
    line = f"  attention {shape[1]} q heads per k/v head, D {shape[2]}, rows {rows}: fp32 max |Δ| {error:.2e}"
    if error > 1e-5:
        failures.append(f"attention fp32 parity {error:.2e}")
    if device.type == "cuda":
        q16, k16, v16 = q.bfloat16(), k.bfloat16(), v.bfloat16()
        truth = decode_attention_torch(q16.float(), k16.float(), v16.float(), valid, 0.125)
        fused = module.decode_attention(q16, k16, v16, valid, bounds, 0.125).float()
        steps = decode_attention_torch(q16, k16, v16, valid, 0.125).float()
        line += _bf16_parity("attention", fused, truth, steps, failures)
        heads, group, dim = shape
        bias = attention_bias(valid, heads, torch.bfloat16)
        flat_q, flat_k, flat_v = q16.reshape(-1, group, dim), k16.flatten(0, 1), v16.flatten(0, 1)
        out = torch.empty_like(q16)
        calls = {
            "torch": lambda: attend_torch(flat_q, flat_k, flat_v, bias, 0.125),
            "triton": lambda: module.decode_attention(q16, k16, v16, valid, bounds, 0.125, out=out),
        }
        line += _speed(calls, replays, failures, "attention", 1)
    print(line, flush=True)
