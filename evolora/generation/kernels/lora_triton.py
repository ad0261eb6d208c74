"""Routed LoRA in two Triton kernels (the BGMV shrink/expand of Punica and S-LoRA).

The layout is :mod:`evolora.generation.kernels.lora_torch`'s: x (M, d_in), a (P, G·r, d_in),
b (P, r, D), slots (M,) with −1 for a bare row, out (M, D). Per sibling group, two launches
whatever the number of slots or projections:

* :func:`lora_shrink`: one program per (row, projection) reads the row's slot, and for a slot
  ≥ 0 the r × d_in block of that slot's A, accumulating A x in fp32; h (M, G·r) in a's dtype
  (zeros for a bare row, whose A is never read).
* :func:`lora_expand`: one program per (row, block of output columns) reads each column's
  projection index, h's r values of that projection and the slot's r × block of s·Bᵀ, sums in fp32, and writes
  ``out + delta`` rounded once to out's dtype, in place; a bare row is neither read nor written.

Against the torch path (:func:`lora_torch.routed_lora_torch`: a dtype copy, the shrink over every
slot, the one-hot product, the expand and the add) a row reads only its own slot's factors, and a
group costs two kernels instead of five. Decoding, M is the batch (one token per row); a prefill's
M rows each still read their slot's factors (SGMV, which shares them over a segment, is not here).

Importing this module needs ``triton`` (the ``gpu`` extra; CUDA builds of torch bring it). With
``TRITON_INTERPRET=1`` set before the import, the kernels run on CPU tensors (numpy underneath;
bf16 is truncated there, so CPU parity is checked in fp32). The kernels call only triton's builtins
(``tl.full``; ``tl.reduce`` over ``tl.sum``'s own combine function, not the jitted ``tl.zeros``/``tl.sum``),
so they also run interpreted in a process that imported triton before setting the variable. Source: Punica (arXiv 2310.18547),
S-LoRA (arXiv 2311.03285).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from evolora.generation.kernels.lora_torch import Columns, check_lora_shapes, column_projections

SHRINK_BLOCK_K = 128
"""Input features per loop pass of the shrink."""

EXPAND_BLOCK_N = 128
"""Output columns per program of the expand."""


_SUM = tl.standard._sum_combine  # what tl.sum reduces with; the interpreter sums it with numpy


@triton.jit
def _shrink_kernel(
    x_ptr,
    a_ptr,
    slot_ptr,
    h_ptr,
    d_in,
    rank,
    stride_xm,
    stride_xk,
    stride_ap,
    stride_ar,
    stride_ak,
    stride_hm,
    stride_hr,
    BLOCK_R: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    m = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1)
    slot = tl.load(slot_ptr + m).to(tl.int64)
    limit = tl.where(slot >= 0, d_in, 0)  # a bare row reads nothing and writes zeros
    slot = tl.maximum(slot, 0)
    r = tl.arange(0, BLOCK_R)
    r_ok = r < rank
    rows = j * rank + r  # rows of a (and columns of h) of projection j
    acc = tl.full((BLOCK_R,), 0.0, tl.float32)
    for k0 in range(0, d_in, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        k_ok = k < limit
        x = tl.load(x_ptr + m * stride_xm + k * stride_xk, mask=k_ok, other=0.0).to(tl.float32)
        a = tl.load(
            a_ptr + slot * stride_ap + rows[:, None] * stride_ar + k[None, :] * stride_ak,
            mask=r_ok[:, None] & k_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        acc += tl.reduce(a * x[None, :], 1, _SUM)
    tl.store(h_ptr + m * stride_hm + rows * stride_hr, acc.to(h_ptr.dtype.element_ty), mask=r_ok)


@triton.jit
def _expand_kernel(
    h_ptr,
    b_ptr,
    slot_ptr,
    proj_ptr,
    out_ptr,
    total,
    rank,
    stride_hm,
    stride_hr,
    stride_bp,
    stride_br,
    stride_bn,
    stride_om,
    stride_on,
    BLOCK_R: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    m = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + m).to(tl.int64)
    limit = tl.where(slot >= 0, total, 0)  # a bare row is neither read nor written
    slot = tl.maximum(slot, 0)
    n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = n < limit
    j = tl.load(proj_ptr + n, mask=n_ok, other=0)  # the projection each output column belongs to
    r = tl.arange(0, BLOCK_R)
    ok = (r < rank)[:, None] & n_ok[None, :]
    h = tl.load(h_ptr + m * stride_hm + (j[None, :] * rank + r[:, None]) * stride_hr, mask=ok, other=0.0)
    b = tl.load(b_ptr + slot * stride_bp + r[:, None] * stride_br + n[None, :] * stride_bn, mask=ok, other=0.0)
    delta = tl.reduce(h.to(tl.float32) * b.to(tl.float32), 0, _SUM)
    out = tl.load(out_ptr + m * stride_om + n * stride_on, mask=n_ok, other=0.0)
    tl.store(
        out_ptr + m * stride_om + n * stride_on, (out.to(tl.float32) + delta).to(out_ptr.dtype.element_ty), mask=n_ok
    )


def lora_shrink(
    x: torch.Tensor, a: torch.Tensor, slots: torch.Tensor, rank: int, out: torch.Tensor | None = None
) -> torch.Tensor:
    """h (M, G·r) in a's dtype, each row's own slot's A's times the row, fp32 accumulation; one launch.

    Shapes: x (M, d_in), a (P, G·r, d_in), slots (M,) integer (−1: zeros), ``out`` (M, G·r) to write
    into (a buffer at a fixed address, for a captured step) or None for a new tensor.
    """
    groups = a.shape[1] // rank
    h = torch.empty(x.shape[0], a.shape[1], dtype=a.dtype, device=x.device) if out is None else out
    if x.shape[0]:
        _shrink_kernel[(x.shape[0], groups)](
            x,
            a,
            slots,
            h,
            x.shape[1],
            rank,
            x.stride(0),
            x.stride(1),
            a.stride(0),
            a.stride(1),
            a.stride(2),
            h.stride(0),
            h.stride(1),
            BLOCK_R=triton.next_power_of_2(rank),
            BLOCK_K=SHRINK_BLOCK_K,
        )
    return h


def lora_expand(
    h: torch.Tensor, b: torch.Tensor, slots: torch.Tensor, columns: Columns, out: torch.Tensor
) -> torch.Tensor:
    """out (M, D) += h · s·Bᵀ of each row's slot (nothing for −1), summed in fp32 and rounded once
    into out's dtype, in place; one launch for every projection of the group. Returns ``out``.

    Shapes: h (M, G·r), b (P, r, D); ``columns``: the projections' output widths (sum D), or each
    output column's projection index (D,) (:func:`lora_torch.column_projections`).
    """
    rank, total = b.shape[1], b.shape[2]
    projection = column_projections(columns, out.device)
    if h.shape[0]:
        grid = (h.shape[0], triton.cdiv(total, EXPAND_BLOCK_N))
        _expand_kernel[grid](
            h,
            b,
            slots,
            projection,
            out,
            total,
            rank,
            h.stride(0),
            h.stride(1),
            b.stride(0),
            b.stride(1),
            b.stride(2),
            out.stride(0),
            out.stride(1),
            BLOCK_R=triton.next_power_of_2(rank),
            BLOCK_N=EXPAND_BLOCK_N,
        )
    return out


def routed_lora_triton(
    x: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    slots: torch.Tensor,
    columns: Columns,
    out: torch.Tensor,
    hidden: torch.Tensor | None = None,
) -> torch.Tensor:
    """``out`` += the routed delta of x, in two launches (shrink, expand); returns ``out``.

    ``hidden``: an (M, G·r) buffer in a's dtype for h (None: a new one). Same contract as
    :func:`evolora.generation.kernels.lora_torch.routed_lora_torch`.

    Raises:
        ValueError: shapes that do not fit the layout.
    """
    rank, _ = check_lora_shapes(x, a, b, slots, columns, out)
    return lora_expand(lora_shrink(x, a, slots, rank, out=hidden), b, slots, columns, out)
