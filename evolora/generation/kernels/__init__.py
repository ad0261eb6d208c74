"""Fused pieces of the decode step, each with a torch reference it is tested against.

* :mod:`~evolora.generation.kernels.lora_torch` / :mod:`~evolora.generation.kernels.lora_triton`:
  the routed LoRA delta of one sibling group, in torch (the static step's masked GEMMs) and in two
  Triton kernels (shrink, expand) with the same arguments;
* :mod:`~evolora.generation.kernels.rotary_torch` / :mod:`~evolora.generation.kernels.rotary_triton`:
  rotary of a step's q/k heads with the k/v cache write, in torch and in one Triton kernel;
* :mod:`~evolora.generation.kernels.stop_mask`: which new tokens could end a stop string, so the
  host decodes only those rows.

:func:`routed_lora` picks the Triton kernels on CUDA when ``triton`` is importable (the ``gpu``
extra), else the torch path. Nothing here is used by the eager engine, the CPU default, and the
graph engine does not call these yet.
"""

from __future__ import annotations

import importlib.util

import torch

from evolora.generation.kernels.lora_torch import Columns, routed_lora_torch


def triton_available() -> bool:
    """Whether the ``triton`` package can be imported (not whether a GPU is present)."""
    return importlib.util.find_spec("triton") is not None


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
        use_triton = x.is_cuda and triton_available()
    if not use_triton:
        return routed_lora_torch(x, a, b, slots, columns, out)
    if not triton_available():
        raise ModuleNotFoundError("the Triton kernels need triton: pip install 'evolora[gpu]'")
    from evolora.generation.kernels.lora_triton import routed_lora_triton

    return routed_lora_triton(x, a, b, slots, columns, out)
