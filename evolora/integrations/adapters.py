"""Adapter helpers shared by the integrations (torch only): random draws, flat vectors, banks.

    shapes = {"layers.0.q_proj": (576, 576), "layers.0.k_proj": (576, 192)}   # module -> (d_in, d_out)
    adapter = random_adapter(shapes, rank=8, generator=torch.Generator().manual_seed(0))
    vector = flatten(adapter)                      # (N,) with N = Σ r·(d_in + d_out)
    same = unflatten(vector, adapter)              # views into vector, shaped like the template
    write_to_bank(same, bank, "S0")                # then bank.save_adapter("S0", "out/s0")

Flat layout: modules in the template's order, each module's A (r, d_in) then B (d_out, r),
row-major. The layout depends only on the template, so a vector and its template round-trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from torch import Tensor

from evolora.bank import Bank
from evolora.factors import random_factors
from evolora.model.targets import check_rank
from evolora.operators import Adapter, check_adapter

__all__ = ["random_adapter", "adapter_shapes", "num_floats", "flatten", "unflatten", "write_to_bank", "save_to_bank"]


def random_adapter(
    shapes: Mapping[str, tuple[int, int]],
    *,
    rank: int,
    generator: torch.Generator,
    b_std: float = 0.01,
    dtype: torch.dtype = torch.float32,
) -> Adapter:
    """A fresh adapter with non-zero ΔW, drawn like :meth:`AdapterBank.init_factors`.

    A ~ U(±1/sqrt(d_in)) (Kaiming-like), B ~ N(0, b_std²). PEFT's B = 0 would make every
    individual identical (design §3), so B is Gaussian.

    Shapes:
        shapes[name] = (d_in, d_out) → adapter[name] = (A: (r, d_in), B: (d_out, r)).

    Args:
        shapes: module name → (d_in, d_out), e.g. ``{"q_proj": (576, 576), "k_proj": (576, 192)}``.
        rank: r ≥ 1, at most min(d_in, d_out) of every module.
        b_std: std of B's entries, ≥ 0.

    Raises:
        ValueError: empty shapes, rank < 1 or above a module's smaller dimension, b_std < 0.
    """
    if not shapes:
        raise ValueError("shapes is empty; pass {module name: (d_in, d_out)}")
    if rank < 1:
        raise ValueError(f"rank must be ≥ 1, got {rank}")
    if b_std < 0:
        raise ValueError(f"b_std must be ≥ 0, got {b_std}")
    check_rank(rank, dict(shapes), "the given shapes")
    factor_shapes = {name: ((rank, d_in), (d_out, rank)) for name, (d_in, d_out) in shapes.items()}
    return random_factors(factor_shapes, generator, b_std=b_std, dtype=dtype)  # the bank's own rule


def adapter_shapes(adapter: Mapping[str, tuple[Tensor, Tensor]]) -> dict[str, tuple[int, int]]:
    """Module name → (d_in, d_out) of an adapter (the input of :func:`random_adapter`)."""
    return {name: (a.shape[1], b.shape[0]) for name, (a, b) in adapter.items()}


def num_floats(adapter: Mapping[str, tuple[Tensor, Tensor]]) -> int:
    """Number of LoRA floats N = Σ r·(d_in + d_out) (2.44 M for SmolLM2-135M at rank 8)."""
    return sum(a.numel() + b.numel() for a, b in adapter.values())


def flatten(adapter: Mapping[str, tuple[Tensor, Tensor]]) -> Tensor:
    """One vector holding every factor: module by module, A then B, row-major.

    Shapes:
        adapter[name] = (A: (r, d_in), B: (d_out, r)) → (N,), N = :func:`num_floats`.

    Raises:
        ValueError / TypeError: malformed adapter (see ``operators.check_adapter``).
    """
    check_adapter(adapter)
    return torch.cat([t.reshape(-1) for a, b in adapter.values() for t in (a, b)])


def unflatten(vector: Tensor, template: Mapping[str, tuple[Tensor, Tensor]]) -> Adapter:
    """The adapter shaped like ``template`` whose factors are read from ``vector``.

    The factors are views into ``vector`` when its dtype and device match the template's (no
    copy); clone them if you keep them while ``vector`` is overwritten.

    Shapes:
        vector: (N,) → adapter[name] = (A: (r, d_in), B: (d_out, r)) as in ``template``.

    Raises:
        ValueError: ``vector`` is not 1-D or its length is not the template's N.
    """
    total = num_floats(template)
    if vector.ndim != 1 or vector.numel() != total:
        raise ValueError(
            f"vector has shape {tuple(vector.shape)} but the template needs ({total},); "
            f"pass one solution (N,), not a batch"
        )
    adapter, offset = {}, 0
    for name, (a, b) in template.items():
        factors = []
        for like in (a, b):
            piece = vector[offset : offset + like.numel()].reshape(like.shape)
            factors.append(piece.to(dtype=like.dtype, device=like.device))
            offset += like.numel()
        adapter[name] = (factors[0], factors[1])
    return adapter


def write_to_bank(adapter: Adapter, bank: Bank, slot: str) -> None:
    """Overwrite ``bank``'s ``slot`` with ``adapter`` (an :class:`evolora.bank.local.AdapterBank`).

    Raises:
        ValueError: modules or shapes differ from the bank's (the message names the first one).
        KeyError: unknown slot.
    """
    bank.set_factors(slot, adapter)


def save_to_bank(adapter: Adapter, bank: Bank, slot: str, directory: str | Path) -> Path:
    """Write ``adapter`` into ``slot`` and save it as a PEFT adapter directory.

    The directory holds ``adapter_config.json`` and ``adapter_model.safetensors`` and loads with
    ``PeftModel.from_pretrained(base, directory)``.
    """
    write_to_bank(adapter, bank, slot)
    return bank.save_adapter(slot, directory)
