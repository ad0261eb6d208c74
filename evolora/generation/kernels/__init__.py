"""Fused pieces of the decode step, each with a torch reference it is tested against.

* :mod:`~evolora.generation.kernels.lora_torch` / :mod:`~evolora.generation.kernels.lora_triton`:
  the routed LoRA delta of one sibling group, in torch (the static step's masked GEMMs) and in two
  Triton kernels (shrink, expand) with the same arguments;
* :mod:`~evolora.generation.kernels.rotary_torch` / :mod:`~evolora.generation.kernels.rotary_triton`:
  rotary of a step's q/k heads with the k/v cache write, in torch and in one Triton kernel;
* :mod:`~evolora.generation.kernels.silu_mul_torch` / :mod:`~evolora.generation.kernels.silu_mul_triton`:
  the gated MLP's silu(gate) · up of the fused gate/up output, in torch and in one Triton kernel;
* :mod:`~evolora.generation.kernels.attention_torch` / :mod:`~evolora.generation.kernels.attention_triton`:
  one decode step's attention over the static cache (grouped-query heads folded, per-row bounds), in
  torch (the whole window) and in one Triton flash-decode kernel;
* :mod:`~evolora.generation.kernels.stop_mask`: which new tokens could end a stop string, so the
  host decodes only those rows.

:func:`kernel_backend` chooses, once per device type, what the graph engine's static step runs:
``"triton"`` on CUDA when ``triton`` imports (the ``gpu`` extra) and a one-off feature test of the
kernels on the device matches the torch path, else ``"torch"`` (the reference, and the CPU path).
:class:`evolora.generation.lora_stack.DenseStack` and :func:`evolora.generation.static_step.decode_step`
read that choice when they are built, never per call. The eager engine, the CPU default, uses none
of these kernels.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import warnings
from typing import Literal

import torch

from evolora.generation.kernels.lora_torch import Columns, routed_lora_torch

Backend = Literal["torch", "triton"]
"""What computes the static step's routed LoRA, rotary, SiLU·mul and attention: the torch path or the
Triton kernels."""

BACKEND_VARIABLE = "EVOLORA_KERNELS"
"""Environment variable that forces the backend (``torch`` or ``triton``) for every later choice."""


def triton_available() -> bool:
    """Whether the ``triton`` package can be imported (not whether a GPU is present)."""
    return importlib.util.find_spec("triton") is not None


def kernel_backend(device: torch.device | str) -> Backend:
    """The static step's backend on ``device``, chosen once per device type (cached for the process).

    ``"triton"`` for a CUDA device when triton imports and :func:`feature_test` passes there; ``"torch"``
    otherwise (a CPU, no triton, or a failed test, which warns once). ``EVOLORA_KERNELS=torch|triton``
    forces the answer (``triton`` on a CPU then needs ``TRITON_INTERPRET=1``).

    Raises:
        ValueError: ``EVOLORA_KERNELS`` set to another value.
    """
    forced = os.environ.get(BACKEND_VARIABLE, "")
    if forced and forced not in ("torch", "triton"):
        raise ValueError(f"{BACKEND_VARIABLE} must be 'torch' or 'triton', got {forced!r}")
    return _chosen(torch.device(device).type, forced)


@functools.cache
def _chosen(device_type: str, forced: str) -> Backend:
    if forced:
        return forced  # type: ignore[return-value]
    if device_type != "cuda" or not triton_available():
        return "torch"
    try:
        feature_test(torch.device("cuda"))
    except Exception as error:  # noqa: BLE001 (a triton that cannot compile here: the torch path)
        warnings.warn(f"the Triton kernels failed their test on this GPU ({error}); using the torch path", stacklevel=3)
        return "torch"
    return "triton"


def feature_test(device: torch.device) -> None:
    """Run every Triton kernel once on tiny fp32 tensors on ``device`` against the torch path.

    Raises:
        AssertionError: a result off by more than 1e-4; any error triton raises compiling or launching.
    """
    from evolora.generation.kernels.lora_triton import routed_lora_triton
    from evolora.generation.kernels.rotary_torch import rotary_kv_write_torch
    from evolora.generation.kernels.rotary_triton import rotary_kv_write

    g = torch.Generator(device="cpu").manual_seed(0)
    x, a, b = (torch.randn(shape, generator=g, device="cpu").to(device) for shape in ((3, 16), (2, 8, 16), (2, 4, 12)))
    slots, out = torch.tensor([1, -1, 0], device=device), torch.randn(3, 12, generator=g, device="cpu").to(device)
    want = routed_lora_torch(x, a, b, slots, (8, 4), out.clone())
    assert (routed_lora_triton(x, a, b, slots, (8, 4), out.clone()) - want).abs().max() <= 1e-4, "routed LoRA"
    y, cos, sin = (torch.randn(shape, generator=g, device="cpu").to(device) for shape in ((2, 1, 3, 8), (2, 8), (2, 8)))
    kv, column = torch.zeros(2, 2, 1, 4, 8, device=device), torch.tensor([1], device=device)
    want_q = rotary_kv_write_torch(y, cos, sin, kv.clone(), column)
    assert (rotary_kv_write(y, cos, sin, kv, column) - want_q).abs().max() <= 1e-4, "rotary"
    _feature_test_step(device, g)


def _feature_test_step(device: torch.device, g: torch.Generator) -> None:
    """The SiLU·mul and decode attention kernels against their torch references (part of :func:`feature_test`)."""
    from evolora.generation.kernels.attention_torch import decode_attention_torch, row_bounds
    from evolora.generation.kernels.attention_triton import decode_attention
    from evolora.generation.kernels.silu_mul_torch import silu_mul_torch
    from evolora.generation.kernels.silu_mul_triton import silu_mul

    y = torch.randn(3, 40, generator=g, device="cpu").to(device)
    assert (silu_mul(y) - silu_mul_torch(y)).abs().max() <= 1e-4, "SiLU·mul"
    q, k, v = (
        torch.randn(shape, generator=g, device="cpu").to(device) for shape in [(2, 2, 3, 16)] + [(2, 2, 20, 16)] * 2
    )
    valid = torch.zeros(2, 20, dtype=torch.bool, device=device)
    valid[0, 3:17], valid[1, :9] = True, True
    want = decode_attention_torch(q, k, v, valid, 0.25)
    assert (decode_attention(q, k, v, valid, row_bounds(valid), 0.25) - want).abs().max() <= 1e-4, "attention"


def routed_lora(
    x: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    slots: torch.Tensor,
    columns: Columns,
    out: torch.Tensor,
    *,
    use_triton: bool | None = None,
) -> torch.Tensor:
    """``out`` (M, D) += the routed LoRA delta of x (M, d_in); returns ``out``.

    The layout is :mod:`~evolora.generation.kernels.lora_torch`'s. ``use_triton``: None picks the
    Triton kernels for CUDA tensors when triton is installed; True forces them (CPU tensors then need
    ``TRITON_INTERPRET=1`` set before triton is first imported); False the torch path.

    Raises:
        ValueError: shapes that do not fit the layout.
        ModuleNotFoundError: ``use_triton=True`` without triton (``pip install 'evolora[gpu]'``).
    """
    if use_triton is None:
        use_triton = kernel_backend(x.device) == "triton"
    if not use_triton:
        return routed_lora_torch(x, a, b, slots, columns, out)
    if not triton_available():
        raise ModuleNotFoundError("the Triton kernels need triton: pip install 'evolora[gpu]'")
    from evolora.generation.kernels.lora_triton import routed_lora_triton

    return routed_lora_triton(x, a, b, slots, columns, out)
