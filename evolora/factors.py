"""LoRA factors of one adapter outside a model: random draws, checks, PEFT adapter directories.

An adapter's factors are {module: (A (r, d_in), B (d_out, r))}, ΔW = (alpha / r) · B A. These
helpers need no model: :class:`evolora.bank.local.AdapterBank` checks what it is given against
its own parameters, :class:`evolora.distributed.sharded_bank.ShardedBank` against shape-and-dtype stand-ins
(``device="meta"`` tensors) of its workers' parameters, so both refuse the same adapters.
Source: PopuLoRA (arXiv 2605.16727) §2 (children overwrite the slot they take over).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import torch
from peft import LoraConfig
from safetensors.torch import save_file

from evolora.io import atomic_path
from evolora.operators import Adapter


def check_factors(factors: Adapter, reference: Mapping[str, tuple[torch.Tensor, torch.Tensor]], rank: int) -> None:
    """Raise unless ``factors`` fit ``reference`` module for module (nothing is copied).

    Args:
        factors: {module: (A, B)} to check. reference: {module: (A, B)} of the destination,
            real parameters or ``device="meta"`` tensors (only shape and dtype are read).
        rank: the bank's LoRA rank (named in the message).

    Raises:
        ValueError: module names differ (missing or unknown), a factor is not a floating-point
            tensor, its shape differs from the reference's, it holds NaN/Inf, or it overflows
            the reference's dtype.
    """
    if set(factors) != set(reference):
        missing = sorted(set(reference) - set(factors))[:3]
        extra = sorted(set(factors) - set(reference))[:3]
        raise ValueError(f"adapter modules do not match the bank: missing {missing}, unexpected {extra}")
    for name, (a_param, b_param) in reference.items():
        _check_pair(name, factors[name], a_param, b_param, rank)


def random_factors(
    shapes: Mapping[str, tuple[tuple[int, ...], tuple[int, ...]]],
    generator: torch.Generator,
    *,
    b_std: float,
    dtype: torch.dtype = torch.float32,
) -> Adapter:
    """Diverse non-zero factors for one adapter: A ~ U(±1/sqrt(d_in)) (Kaiming-like), B ~ N(0, b_std²).

    Shapes: ``shapes`` {module: ((r, d_in), (d_out, r))} in; {module: (A, B)} out on the generator's
    device, drawn module by module in the order of ``shapes`` from ``generator`` (a CPU generator
    gives the same factors whatever device the bank copies them to; PEFT's default B = 0 would make
    every individual identical, design §3; PopuLoRA arXiv 2605.16727 §2).
    """
    factors = {}
    for name, (a_shape, b_shape) in shapes.items():
        bound = 1.0 / a_shape[1] ** 0.5
        a = (torch.rand(a_shape, generator=generator, dtype=dtype, device=generator.device) * 2 - 1) * bound
        b = torch.randn(b_shape, generator=generator, dtype=dtype, device=generator.device) * b_std
        factors[name] = (a, b)
    return factors


def write_adapter(directory: str | Path, state: dict[str, torch.Tensor], lora_config: LoraConfig) -> Path:
    """Write one adapter's PEFT state dict and config as a PEFT adapter directory, atomically.

    Raises:
        OSError: the directory cannot be written (the old one, if any, is left as it was).
    """
    with atomic_path(directory, directory=True) as tmp:
        save_file(state, str(tmp / "adapter_model.safetensors"))
        lora_config.save_pretrained(str(tmp))
    return Path(directory)


def _check_pair(name: str, pair, a_param: torch.Tensor, b_param: torch.Tensor, rank: int) -> None:
    """Raise ValueError unless ``pair`` is two finite float tensors shaped like (A (r, d_in), B (d_out, r))."""
    if not (
        isinstance(pair, (tuple, list))
        and len(pair) == 2
        and all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in pair)
    ):
        kinds = [
            type(t).__name__ if not isinstance(t, torch.Tensor) else str(t.dtype)
            for t in (pair if isinstance(pair, (tuple, list)) else [pair])
        ]
        raise ValueError(f"{name}: factors must be a pair (A, B) of floating-point tensors, got {kinds}")
    a, b = pair
    if a.shape != a_param.shape or b.shape != b_param.shape:
        raise ValueError(
            f"{name}: factor shapes A{tuple(a.shape)} B{tuple(b.shape)} differ from the bank's "
            f"A{tuple(a_param.shape)} B{tuple(b_param.shape)}; children must keep rank {rank}"
        )
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        raise ValueError(f"{name}: factors contain NaN or Inf")
    if not (torch.isfinite(a.to(a_param.dtype)).all() and torch.isfinite(b.to(b_param.dtype)).all()):
        raise ValueError(f"{name}: factors overflow the bank's {a_param.dtype} (|value| too large)")
