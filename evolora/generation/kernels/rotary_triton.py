"""Rotary embedding of a decode step's q/k heads and the k/v cache write, in one Triton kernel.

Same layout and result as :func:`evolora.generation.kernels.rotary_torch.rotary_kv_write_torch`:
one program per (row, key/value head) reads that head group's G + 2 heads of the fused q/k/v
output once (and their halves swapped, by index, so the GEMM need not write a swapped copy), rotates
k and the q heads in fp32 with one rounding each, writes k and v into the cache column and q' into
its own buffer. The torch path costs a dozen element-wise kernels and a cache copy per layer.

Importing this module needs ``triton`` (see :mod:`evolora.generation.kernels.lora_triton` for the
interpreter). Source: RoFormer (arXiv 2104.09864).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from evolora.generation.kernels.rotary_torch import check_rotary_shapes


@triton.jit
def _rotary_kernel(
    y_ptr,
    cos_ptr,
    sin_ptr,
    kv_ptr,
    column_ptr,
    q_ptr,
    width,
    scale,
    sy_r,
    sy_h,
    sy_g,
    sy_d,
    sc_r,
    sc_d,
    ss_r,
    ss_d,
    skv_s,
    skv_r,
    skv_h,
    skv_c,
    skv_d,
    sq_r,
    sq_h,
    sq_g,
    sq_d,
    HALF: tl.constexpr,
    BLOCK_G: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    d = tl.arange(0, 2 * HALF)
    partner = (d + HALF) % (2 * HALF)  # the other half: swap_halves by index
    g = tl.arange(0, BLOCK_G)
    g_ok = g < width
    head = y_ptr + r * sy_r + h * sy_h + g[:, None] * sy_g
    y = tl.load(head + d[None, :] * sy_d, mask=g_ok[:, None], other=0.0)
    swapped = tl.load(head + partner[None, :] * sy_d, mask=g_ok[:, None], other=0.0)
    cos = tl.load(cos_ptr + r * sc_r + d * sc_d)
    sin = tl.load(sin_ptr + r * ss_r + d * ss_d)
    sin = tl.where(d < HALF, -sin, sin)
    factor = tl.where(g >= 2, scale, 1.0)[:, None]  # the q heads' tables carry the scaling
    cos_g = cos[None, :].to(tl.float32) * factor
    sin_g = sin[None, :].to(tl.float32) * factor
    rotated = y.to(tl.float32) * cos_g + swapped.to(tl.float32) * sin_g
    out = tl.where((g == 1)[:, None], y.to(tl.float32), rotated)  # v is not rotated
    column = tl.load(column_ptr)
    g64 = g.to(tl.int64)
    tl.store(
        kv_ptr + g64[:, None] * skv_s + r * skv_r + h * skv_h + column * skv_c + d[None, :] * skv_d,
        out.to(kv_ptr.dtype.element_ty),
        mask=(g < 2)[:, None],
    )
    tl.store(
        q_ptr + r * sq_r + h * sq_h + (g64[:, None] - 2) * sq_g + d[None, :] * sq_d,
        out.to(q_ptr.dtype.element_ty),
        mask=((g >= 2) & g_ok)[:, None],
    )


def rotary_kv_write(
    y: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    kv: torch.Tensor,
    column: torch.Tensor,
    scale: float = 1.0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rotate k and q of ``y`` (R, H_kv, G + 2, D), write k|v into ``kv`` (2, R, H_kv, C, D) at ``column``
    (1,); returns q' (R, H_kv, G, D) in y's dtype (in ``out`` when given); one launch. D a power of two.

    Raises:
        ValueError: shapes that do not fit, or a head size that is not a power of two.
    """
    check_rotary_shapes(y, cos, sin, kv, column)
    rows, heads, width, dim = y.shape
    if dim & (dim - 1):
        raise ValueError(f"the Triton rotary needs a power-of-two head size, got {dim}")
    q = torch.empty(rows, heads, width - 2, dim, dtype=y.dtype, device=y.device) if out is None else out
    if rows:
        _rotary_kernel[(rows, heads)](
            y,
            cos,
            sin,
            kv,
            column,
            q,
            width,
            float(scale),
            *y.stride(),
            *cos.stride(),
            *sin.stride(),
            kv.stride(0),
            kv.stride(1),
            kv.stride(2),
            kv.stride(3),
            kv.stride(4),
            *q.stride(),
            HALF=dim // 2,
            BLOCK_G=triton.next_power_of_2(width),
        )
    return q
