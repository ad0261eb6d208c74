"""SiLU(gate) · up of the fused gate/up output in one Triton kernel.

Same layout and result as :func:`evolora.generation.kernels.silu_mul_torch.silu_mul_torch`: one
program per (row, block of I columns) reads the gate and the up halves of y (R, 2·I) once, computes
silu(gate) · up in fp32 and writes the product rounded once, (R, I). The torch path runs two
element-wise kernels (the SiLU, then the product) and writes the SiLU in between.

Importing this module needs ``triton`` (see :mod:`evolora.generation.kernels.lora_triton` for the
interpreter). Source: GLU Variants Improve Transformer (arXiv 2002.05202) §2 (SwiGLU).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from evolora.generation.kernels.silu_mul_torch import check_silu_mul_shapes

BLOCK_COLUMNS = 1024
"""Output columns per program."""


@triton.jit
def _silu_mul_kernel(y_ptr, out_ptr, width, sy_r, sy_c, so_r, so_c, BLOCK: tl.constexpr):
    r = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = c < width
    gate = tl.load(y_ptr + r * sy_r + c * sy_c, mask=ok, other=0.0).to(tl.float32)
    up = tl.load(y_ptr + r * sy_r + (c + width) * sy_c, mask=ok, other=0.0).to(tl.float32)
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + r * so_r + c * so_c, out.to(out_ptr.dtype.element_ty), mask=ok)


def silu_mul(y: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """silu(gate) · up of y (R, 2·I), gate in columns [0, I); returns (R, I) in y's dtype (in ``out``
    when given), computed in fp32 and rounded once; one launch.

    Raises:
        ValueError: shapes that do not fit (:func:`check_silu_mul_shapes`).
    """
    width = check_silu_mul_shapes(y, out)
    out = torch.empty(y.shape[0], width, dtype=y.dtype, device=y.device) if out is None else out
    if y.shape[0] and width:
        block = min(BLOCK_COLUMNS, triton.next_power_of_2(width))
        _silu_mul_kernel[(y.shape[0], triton.cdiv(width, block))](
            y, out, width, *y.stride(), *out.stride(), BLOCK=block
        )
    return out
