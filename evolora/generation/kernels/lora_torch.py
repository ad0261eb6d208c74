"""The routed LoRA delta of one sibling group in torch: the reference of the Triton kernels.

The layout every routed-LoRA function of :mod:`evolora.generation.kernels` takes, for a group of
G sibling projections that read one input (q/k/v: G = 3; gate/up: 2; o or down: 1), P bank slots
and rank r:

    x: (M, d_in)              one row per token (a decode step: one per batch row)
    a: (P, G·r, d_in)         slot p's A of projection j in rows [j·r, (j+1)·r)  (routed.py's ``_Group.a``)
    b: (P, r, D)              column c holds s·B_jᵀ's column of projection j = j(c) of slot p, s = alpha / r folded in
    columns: widths (d_0, .., d_{G−1}) of contiguous column ranges (D = Σ d_j), or the (D,) integer
                              tensor j(c) (any order, repeats allowed: the static step's q/k/v layout)
    slots: (M,) integer       the row's bank slot, −1 for a bare row (no delta)
    out: (M, D)               the group's base output (W x), the delta added in place

    h = shrink(x):  h[m, j·r:(j+1)·r] = A_j[slots[m]] x[m]          (M, G·r), in a's dtype
    expand(h):      out[m, c] += h[m, j(c)·r:(j(c)+1)·r] · b[slots[m], :, c]

computed in a's dtype (the fp32 factors) and rounded once into ``out``'s dtype. The functions here
compute it as the static decode step does (:mod:`evolora.generation.static_step`: a one-hot row mask
over every slot's columns, then dense GEMMs over the stacked factors), so the kernels are checked
against the path they replace. Source: Punica (arXiv 2310.18547) and S-LoRA (arXiv 2311.03285),
whose shrink/expand split this is.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Columns = Sequence[int] | torch.Tensor
"""Output widths of contiguous projections, or each output column's projection index (D,)."""

_PROJECTIONS: dict[tuple, torch.Tensor] = {}


def column_projections(columns: Columns, device: torch.device) -> torch.Tensor:
    """(D,) int32 on ``device``: each output column's projection. Widths are expanded once per
    (widths, device) and cached, so a captured step reads a tensor made before the capture."""
    if isinstance(columns, torch.Tensor):
        return columns
    key = (tuple(int(w) for w in columns), str(device))
    if key not in _PROJECTIONS:
        index = torch.repeat_interleave(torch.arange(len(key[0]), device="cpu"), torch.tensor(key[0], device="cpu"))
        _PROJECTIONS[key] = index.to(device=device, dtype=torch.int32)
    return _PROJECTIONS[key]


def check_lora_shapes(
    x: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    slots: torch.Tensor,
    columns: Columns,
    out: torch.Tensor | None = None,
) -> tuple[int, int]:
    """Validate the layout above; returns (r, G). A projection index tensor's values (in [0, G)) are
    not read (that would wait for the device).

    Raises:
        ValueError: a shape, dtype or device that does not fit the layout, with the sizes seen.
    """
    if x.dim() != 2 or a.dim() != 3 or b.dim() != 3 or slots.dim() != 1:
        raise ValueError(
            f"expected x (M, d_in), a (P, G·r, d_in), b (P, r, D), slots (M,); got "
            f"{tuple(x.shape)}, {tuple(a.shape)}, {tuple(b.shape)}, {tuple(slots.shape)}"
        )
    rank = b.shape[1]
    if isinstance(columns, torch.Tensor):
        if columns.dim() != 1 or columns.shape[0] != b.shape[2] or columns.dtype.is_floating_point:
            raise ValueError(
                f"columns must be b's {b.shape[2]} output columns' projection indices (integers), "
                f"got {columns.dtype} {tuple(columns.shape)}"
            )
        groups = a.shape[1] // max(rank, 1)
    else:
        widths = tuple(int(w) for w in columns)
        groups = len(widths)
        if not widths or min(widths) < 1:
            raise ValueError(f"widths must be positive output widths, got {widths}")
        if b.shape[2] != sum(widths):
            raise ValueError(f"b has {b.shape[2]} output columns, the widths {widths} sum to {sum(widths)}")
    if a.shape[0] != b.shape[0] or a.shape[1] != groups * rank or a.shape[2] != x.shape[1]:
        raise ValueError(
            f"a {tuple(a.shape)} does not fit x {tuple(x.shape)}, b {tuple(b.shape)} and "
            f"{groups} projections of rank {rank}: expected ({b.shape[0]}, {groups * rank}, {x.shape[1]})"
        )
    if slots.shape[0] != x.shape[0] or slots.dtype.is_floating_point:
        raise ValueError(
            f"slots must be (M,) integers for the {x.shape[0]} rows of x, got {slots.dtype} {tuple(slots.shape)}"
        )
    if out is not None and tuple(out.shape) != (x.shape[0], b.shape[2]):
        raise ValueError(f"out is {tuple(out.shape)}, expected ({x.shape[0]}, {b.shape[2]})")
    extra = (() if out is None else (out,)) + ((columns,) if isinstance(columns, torch.Tensor) else ())
    devices = {t.device for t in (x, a, b, slots) + extra}
    if len(devices) > 1:
        raise ValueError(f"x, a, b, slots and out must share one device, got {sorted(map(str, devices))}")
    return rank, groups


def stack_lora(
    a_factors: Sequence[Sequence[torch.Tensor]], b_factors: Sequence[Sequence[torch.Tensor]], scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The layout's ``a`` (P, G·r, d_in) and ``b`` (P, r, D) from PEFT's factors.

    Args:
        a_factors: [p][j] slot p's ``lora_A`` weight of projection j, (r, d_in).
        b_factors: [p][j] slot p's ``lora_B`` weight of projection j, (d_j, r).
        scale: alpha / r, folded into ``b``.
    """
    a = torch.stack([torch.cat(list(per_slot)) for per_slot in a_factors])
    b = torch.stack([torch.cat([f.t() for f in per_slot], dim=1) for per_slot in b_factors]) * scale
    return a, b.contiguous()


def _onehot(slots: torch.Tensor, count: int, dtype: torch.dtype) -> torch.Tensor:
    """(M, P): 1 at each row's slot, an all-zero row for slot −1."""
    return (slots[:, None] == torch.arange(count, device=slots.device)).to(dtype)


def lora_shrink_torch(x: torch.Tensor, a: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """h (M, G·r) in a's dtype: each row's own slot's A's applied to it (zero for slot −1).

    As the static step: x·A over every slot's columns, masked by the row's one-hot; the sum over
    slots adds one product and P − 1 zeros, so it is exact."""
    count, width, d_in = a.shape
    h = torch.mm(x.to(a.dtype), a.reshape(count * width, d_in).t())  # (M, P·G·r)
    h = h.view(x.shape[0], count, width).mul_(_onehot(slots, count, a.dtype)[:, :, None])
    return h.sum(dim=1)


def static_layout(b: torch.Tensor, columns: Columns, groups: int) -> torch.Tensor:
    """The static step's block-structured B (P·G·r, D) from the layout's b (P, r, D): column c's
    factors in the rows of its projection j(c), zero in the other projections' rows."""
    count, rank, total = b.shape
    projection = column_projections(columns, b.device).long()
    block = b.new_zeros(count, groups * rank, total)
    every = torch.arange(total, device=b.device)
    for k in range(rank):
        block[:, projection * rank + k, every] = b[:, k, :]
    return block.view(count * groups * rank, total)


def lora_expand_torch(
    h: torch.Tensor, b: torch.Tensor, slots: torch.Tensor, columns: Columns, out: torch.Tensor
) -> torch.Tensor:
    """out (M, D) += each row's delta h · s·Bᵀ of its slot, in h's dtype, rounded once; returns ``out``.

    As the static step: the masked h over every slot against a block-structured B
    (:func:`static_layout`), one GEMM; rows of slot −1 get + 0."""
    count = b.shape[0]
    block = static_layout(b, columns, h.shape[1] // b.shape[1])
    masked = (h[:, None, :] * _onehot(slots, count, h.dtype)[:, :, None]).reshape(h.shape[0], -1)
    if out.dtype == masked.dtype:
        return out.addmm_(masked, block)
    return out.add_(torch.mm(masked, block))


def routed_lora_torch(
    x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, slots: torch.Tensor, columns: Columns, out: torch.Tensor
) -> torch.Tensor:
    """``out`` += the routed delta of x (shrink then expand, the layout above); returns ``out``.

    Raises:
        ValueError: shapes that do not fit the layout (:func:`check_lora_shapes`).
    """
    check_lora_shapes(x, a, b, slots, columns, out)
    return lora_expand_torch(lora_shrink_torch(x, a, slots), b, slots, columns, out)
