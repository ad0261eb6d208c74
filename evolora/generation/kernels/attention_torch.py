"""Attention of one decode step over the static cache, in torch: the reference of
:mod:`evolora.generation.kernels.attention_triton`, and the static step's torch path.

The layout is the static step's (:func:`evolora.generation.static_step.decode_step`): one query
position per row, the query heads grouped by the key/value head they attend,

    q (R, H_kv, G, D),  k, v (R, H_kv, W, D) the cache's first W columns,  valid (R, W) bool
    out[r, j, g] = Σ_c softmax_c(s · q[r, j, g] · k[r, j, c] + b[r, c]) · v[r, j, c]

with b 0 where ``valid`` and −inf elsewhere (left padding, columns not yet written) and s the
model's softmax scale. The torch path computes every row over the whole window: the scores as one
``baddbmm`` onto the additive mask, one softmax, one ``bmm``. :func:`row_bounds` gives each row's
first and last attended column, what the Triton kernel reads between.
Source: Attention Is All You Need (arXiv 1706.03762) §3.2.1; GQA (arXiv 2305.13245).
"""

from __future__ import annotations

import torch


def check_attention_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor) -> None:
    """Validate the layout above.

    Raises:
        ValueError: shapes or dtypes that do not fit, with the sizes seen.
    """
    if q.dim() != 4:
        raise ValueError(f"q must be (R, H_kv, G, D), got {tuple(q.shape)}")
    rows, heads, _, dim = q.shape
    if k.dim() != 4 or k.shape != v.shape or (k.shape[0], k.shape[1], k.shape[3]) != (rows, heads, dim):
        raise ValueError(f"k and v must be ({rows}, {heads}, W, {dim}), got {tuple(k.shape)}, {tuple(v.shape)}")
    if valid.dtype != torch.bool or tuple(valid.shape) != (rows, k.shape[2]):
        raise ValueError(f"valid must be a ({rows}, {k.shape[2]}) bool mask, got {valid.dtype} {tuple(valid.shape)}")


def attention_bias(valid: torch.Tensor, kv_heads: int, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask (R·H_kv, 1, W) in ``dtype``: 0 where ``valid`` (R, W), −inf elsewhere."""
    rows, window = valid.shape
    bias = torch.full((rows, kv_heads, 1, window), -float("inf"), dtype=dtype, device=valid.device)
    return bias.masked_fill_(valid[:, None, None, :], 0.0).view(rows * kv_heads, 1, window)


def attend_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """softmax(bias + scale · q kᵀ) v with the batch (row, key/value head) flattened: the static step's ops.

    Shapes: q (R·H_kv, G, D), k and v (R·H_kv, W, D), bias (R·H_kv, 1, W) (:func:`attention_bias`);
    returns (R·H_kv, G, D) in q's dtype (the softmax accumulates in fp32).
    """
    probs = torch.baddbmm(bias, q, k.transpose(1, 2), alpha=scale).softmax(dim=-1)  # (R·H_kv, G, W)
    return torch.bmm(probs, v)


def decode_attention_torch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor, scale: float
) -> torch.Tensor:
    """The attention above over the whole window; returns (R, H_kv, G, D) in q's dtype.

    Raises:
        ValueError: shapes that do not fit (:func:`check_attention_shapes`).
    """
    check_attention_shapes(q, k, v, valid)
    rows, heads, group, dim = q.shape
    bias = attention_bias(valid, heads, q.dtype)
    out = attend_torch(q.reshape(-1, group, dim), k.flatten(0, 1), v.flatten(0, 1), bias, scale)
    return out.view(rows, heads, group, dim)


def row_bounds(valid: torch.Tensor) -> torch.Tensor:
    """(R, 2) int32: each row's first attended column and one past its last, of ``valid`` (R, W) bool
    (0, 0 for a row with none). Fixed shapes and no host sync: computed once per captured step."""
    window = valid.shape[1]
    column = torch.arange(window, dtype=torch.int32, device=valid.device)
    start = torch.where(valid, column, window).amin(dim=1)
    end = torch.where(valid, column + 1, 0).amax(dim=1)
    return torch.stack([torch.minimum(start, end), end], dim=1).to(torch.int32)
