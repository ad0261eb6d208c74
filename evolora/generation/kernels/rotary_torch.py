"""Rotary embedding of one decode step's q/k heads with the k/v cache write, in torch: the reference
of :mod:`evolora.generation.kernels.rotary_triton`.

The layout is the static step's (:func:`evolora.generation.static_step.qkv_order` without the
halves-swapped copy): the fused q/k/v GEMM's output viewed as y (R, H_kv, G + 2, D), per key/value
head its k head, its v head, then the G = H_q / H_kv query heads that attend it. With HF's tables
``cos``, ``sin`` (R, D) at each row's position:

    k' = k·cos + rotate_half(k)·sin  → kv[0, :, :, column]
    v                                → kv[1, :, :, column]
    q' = (q·cos + rotate_half(q)·sin)·scale   returned, (R, H_kv, G, D)

computed as the static step does: ``x·cos + swap_halves(x)·sin'`` with ``sin'``'s first half negated
(HF's ``rotate_half`` bitwise) and ``scale`` (the attention scaling when it is a power of two, else
1) folded into the q heads' tables. Source: RoFormer (arXiv 2104.09864); HF's ``apply_rotary_pos_emb``.
"""

from __future__ import annotations

import torch


def check_rotary_shapes(
    y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: torch.Tensor, column: torch.Tensor
) -> None:
    """Validate the layout above.

    Raises:
        ValueError: shapes that do not fit, with the sizes seen.
    """
    if y.dim() != 4 or y.shape[2] < 3 or y.shape[3] % 2:
        raise ValueError(f"y must be (R, H_kv, G + 2, D) with G >= 1 and D even, got {tuple(y.shape)}")
    rows, heads, _, dim = y.shape
    if tuple(cos.shape) != (rows, dim) or tuple(sin.shape) != (rows, dim):
        raise ValueError(f"cos and sin must be (R, D) = ({rows}, {dim}), got {tuple(cos.shape)}, {tuple(sin.shape)}")
    if kv.dim() != 5 or kv.shape[0] != 2 or kv.shape[1] != rows or kv.shape[2] != heads or kv.shape[4] != dim:
        raise ValueError(f"kv must be (2, {rows}, {heads}, C, {dim}), got {tuple(kv.shape)}")
    if column.shape != (1,) or column.dtype.is_floating_point:
        raise ValueError(f"column must be a (1,) integer tensor, got {column.dtype} {tuple(column.shape)}")


def rotary_kv_write_torch(
    y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: torch.Tensor, column: torch.Tensor, scale: float = 1.0
) -> torch.Tensor:
    """Rotate the k and q heads of ``y``, write k|v into ``kv`` at ``column``; returns q' (R, H_kv, G, D).

    Raises:
        ValueError: shapes that do not fit (:func:`check_rotary_shapes`).
    """
    check_rotary_shapes(y, cos, sin, kv, column)
    rows, heads, width, dim = y.shape
    half = dim // 2
    signed = torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)[:, None, None, :]  # (R, 1, 1, D)
    cos = cos[:, None, None, :]
    swapped = y.view(rows, heads, width, 2, half).flip(3).view(rows, heads, width, dim)
    k = y[:, :, :1] * cos + swapped[:, :, :1] * signed  # (R, H_kv, 1, D)
    q = y[:, :, 2:] * (cos * scale) + swapped[:, :, 2:] * (signed * scale)
    kv.index_copy_(3, column, torch.cat([k, y[:, :, 1:2]], dim=2).permute(2, 0, 1, 3).unsqueeze(3))
    return q
