"""Attention of one decode step in one Triton kernel (a flash-decode over the static cache).

Same layout and result as :func:`evolora.generation.kernels.attention_torch.decode_attention_torch`:
one program per (row, key/value head) loads that head's G query heads once, then walks the row's
cache columns from its first to its last attended one (:func:`~evolora.generation.kernels.attention_torch.row_bounds`),
``BLOCK_N`` at a time: each block of k and v is read once for the G heads that attend it
(grouped-query heads folded), the columns ``valid`` leaves out inside the bounds are masked, and the
softmax runs online (a running maximum and sum) with every product, sum and exponential in fp32;
the output is rounded once. A row reads only its own filled columns, not its left padding nor the
window's unwritten end; the torch path reads the whole window, in a ``baddbmm``, a softmax and a
``bmm`` per layer, plus the additive mask it builds per step.

Importing this module needs ``triton`` (see :mod:`evolora.generation.kernels.lora_triton` for the
interpreter: only triton's builtins are called, the reductions through ``tl.reduce``).
Source: FlashAttention (arXiv 2205.14135) §3.1 (the online softmax); Flash-Decoding (Dao et al.,
2023); GQA (arXiv 2305.13245).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from evolora.generation.kernels.attention_torch import check_attention_shapes

TILE_ELEMENTS = 8192
"""The most q·k products one block of columns holds (G × BLOCK_N × D, padded to powers of two)."""

_SUM = tl.standard._sum_combine
_MAX = tl.standard._elementwise_max


@triton.jit
def _decode_attention_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    valid_ptr,
    bounds_ptr,
    out_ptr,
    scale,
    group,
    dim,
    sq_r,
    sq_h,
    sq_g,
    sq_d,
    sk_r,
    sk_h,
    sk_c,
    sk_d,
    sv_r,
    sv_h,
    sv_c,
    sv_d,
    sm_r,
    sm_c,
    sb_r,
    sb_i,
    so_r,
    so_h,
    so_g,
    so_d,
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    r = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    g = tl.arange(0, BLOCK_G)
    d = tl.arange(0, BLOCK_D)
    d_ok = d < dim
    q_ok = (g < group)[:, None] & d_ok[None, :]
    q = tl.load(q_ptr + r * sq_r + h * sq_h + g[:, None] * sq_g + d[None, :] * sq_d, mask=q_ok, other=0.0)
    q = q.to(tl.float32)  # (G, D)
    start = tl.load(bounds_ptr + r * sb_r)
    end = tl.load(bounds_ptr + r * sb_r + sb_i)
    top = tl.full((BLOCK_G,), float("-inf"), tl.float32)  # the running maximum of each head's scores
    total = tl.full((BLOCK_G,), 0.0, tl.float32)  # the running sum of exp(score - top)
    acc = tl.full((BLOCK_G, BLOCK_D), 0.0, tl.float32)
    for first in range(start, end, BLOCK_N):
        n = (first + tl.arange(0, BLOCK_N)).to(tl.int64)
        inside = n < end
        attended = inside & (tl.load(valid_ptr + r * sm_r + n * sm_c, mask=inside, other=0) != 0)
        kv_ok = attended[:, None] & d_ok[None, :]
        k = tl.load(k_ptr + r * sk_r + h * sk_h + n[:, None] * sk_c + d[None, :] * sk_d, mask=kv_ok, other=0.0)
        scores = tl.reduce(q[:, None, :] * k.to(tl.float32)[None, :, :], 2, _SUM) * scale  # (G, N)
        scores = tl.where(attended[None, :], scores, float("-inf"))
        new_top = tl.maximum(top, tl.reduce(scores, 1, _MAX))
        shift = tl.where(new_top == float("-inf"), 0.0, new_top)  # a block with nothing attended yet
        weights = tl.exp(scores - shift[:, None])
        correction = tl.exp(top - shift)
        v = tl.load(v_ptr + r * sv_r + h * sv_h + n[:, None] * sv_c + d[None, :] * sv_d, mask=kv_ok, other=0.0)
        total = total * correction + tl.reduce(weights, 1, _SUM)
        acc = acc * correction[:, None] + tl.reduce(weights[:, :, None] * v.to(tl.float32)[None, :, :], 1, _SUM)
        top = new_top
    out = acc / total[:, None]
    tl.store(
        out_ptr + r * so_r + h * so_h + g[:, None] * so_g + d[None, :] * so_d,
        out.to(out_ptr.dtype.element_ty),
        mask=q_ok,
    )


def decode_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    valid: torch.Tensor,
    bounds: torch.Tensor,
    scale: float,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(s · q kᵀ, masked by ``valid``) v for each row, reading its columns [start, end) only; one launch.

    Shapes: q (R, H_kv, G, D); k, v (R, H_kv, W, D) (views of the cache: any strides); valid (R, W)
    bool; bounds (R, 2) integer, each row's [start, end) (:func:`attention_torch.row_bounds` of
    ``valid``: every attended column must lie inside); ``scale`` the model's softmax scale (1 when it
    is folded into q). Returns (R, H_kv, G, D) in q's dtype (in ``out`` when given). A row with no
    attended column gives NaN, as the torch path's softmax of −inf does.

    Raises:
        ValueError: shapes that do not fit (:func:`attention_torch.check_attention_shapes`) or bounds
            not (R, 2) integers.
    """
    check_attention_shapes(q, k, v, valid)
    rows, heads, group, dim = q.shape
    if tuple(bounds.shape) != (rows, 2) or bounds.dtype.is_floating_point:
        raise ValueError(f"bounds must be ({rows}, 2) integers, got {bounds.dtype} {tuple(bounds.shape)}")
    out = torch.empty(rows, heads, group, dim, dtype=q.dtype, device=q.device) if out is None else out
    if rows and heads:
        block_g, block_d = triton.next_power_of_2(group), triton.next_power_of_2(dim)
        block_n = max(16, min(64, TILE_ELEMENTS // (block_g * block_d)))
        _decode_attention_kernel[(rows, heads)](
            q,
            k,
            v,
            valid.view(torch.uint8),
            bounds,
            out,
            float(scale),
            group,
            dim,
            *q.stride(),
            *k.stride(),
            *v.stride(),
            *valid.stride(),
            *bounds.stride(),
            *out.stride(),
            BLOCK_G=block_g,
            BLOCK_N=block_n,
            BLOCK_D=block_d,
        )
    return out
