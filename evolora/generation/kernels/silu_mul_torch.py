"""The gated MLP's activation, SiLU(gate) · up, in torch: the reference of
:mod:`evolora.generation.kernels.silu_mul_triton`.

The fused gate/up GEMM of the static step writes y (R, 2·I): the gate projection in columns
[0, I), the up projection in [I, 2·I). The MLP's input to its down projection is

    h = silu(y[:, :I]) ⊙ y[:, I:],   silu(x) = x · σ(x) = x / (1 + e^(−x))

Source: GLU Variants Improve Transformer (arXiv 2002.05202) §2 (SwiGLU); SiLU (arXiv 1702.03118).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def check_silu_mul_shapes(y: torch.Tensor, out: torch.Tensor | None = None) -> int:
    """Validate y (R, 2·I) and, when given, out (R, I); returns I.

    Raises:
        ValueError: shapes that do not fit, with the sizes seen.
    """
    if y.dim() != 2 or y.shape[1] % 2:
        raise ValueError(f"y must be (R, 2·I), the gate then the up projection, got {tuple(y.shape)}")
    width = y.shape[1] // 2
    if out is not None and tuple(out.shape) != (y.shape[0], width):
        raise ValueError(f"out must be ({y.shape[0]}, {width}), got {tuple(out.shape)}")
    return width


def silu_mul_torch(y: torch.Tensor) -> torch.Tensor:
    """silu(gate) · up of y (R, 2·I); returns (R, I) in y's dtype (two element-wise kernels).

    Raises:
        ValueError: shapes that do not fit (:func:`check_silu_mul_shapes`).
    """
    width = check_silu_mul_shapes(y)
    return F.silu(y[:, :width]) * y[:, width:]
