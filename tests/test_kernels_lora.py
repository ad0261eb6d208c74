"""The routed LoRA kernels: the torch reference against a per-row loop over PEFT-style factors, and
the Triton shrink/expand against the reference in fp32 (under ``TRITON_INTERPRET=1`` on the CPU;
skipped without triton). bf16 parity needs a GPU: ``benchmarks/gpu_kernels.py``."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import kernels_module

from evolora.generation.kernels import routed_lora
from evolora.generation.kernels.lora_torch import column_projections, routed_lora_torch, stack_lora
from evolora.generation.static_step import qkv_order

SHAPES = [  # (rows M, d_in, slots P, rank r, output widths of the group's projections)
    (7, 200, 3, 8, (48, 24, 24)),  # q/k/v with grouped-query heads: different widths
    (5, 64, 8, 4, (128, 128)),  # gate/up
    (9, 130, 2, 16, (64,)),  # o or down
    (3, 33, 1, 3, (17, 5, 9, 11)),  # four projections, a rank that is not a power of two
]


def _case(rows, d_in, count, rank, widths, seed=0):
    """Unstacked factors as PEFT holds them, their stacked layout, slots with −1, a base output."""
    g = torch.Generator().manual_seed(seed)
    a_f = [[torch.randn(rank, d_in, generator=g) / d_in**0.5 for _ in widths] for _ in range(count)]
    b_f = [[torch.randn(w, rank, generator=g) * 0.1 for w in widths] for _ in range(count)]
    slots = torch.randint(-1, count, (rows,), generator=g)
    slots[0], slots[-1] = -1, count - 1
    x = torch.randn(rows, d_in, generator=g)
    base = torch.randn(rows, sum(widths), generator=g)
    return a_f, b_f, slots, x, base


@pytest.mark.parametrize("shape", SHAPES)
def test_reference_is_each_rows_own_adapter(shape):
    rows, d_in, count, rank, widths = shape
    a_f, b_f, slots, x, base = _case(*shape)
    scale = 2.0
    a, b = stack_lora(a_f, b_f, scale)
    got = routed_lora_torch(x, a, b, slots, widths, base.clone())
    for m in range(rows):
        p = int(slots[m])
        want = base[m] if p < 0 else base[m] + scale * torch.cat([bj @ (aj @ x[m]) for aj, bj in zip(a_f[p], b_f[p])])
        torch.testing.assert_close(got[m], want, rtol=0, atol=1e-5)
        if p < 0:
            assert torch.equal(got[m], base[m])  # a bare row: bitwise untouched


def _qkv_columns(widths):
    """The static step's q/k/v output order (k, v, then q heads per key/value head, and the copy with
    halves swapped: every column twice) for heads of 8: (D',) column indices into the widths' order."""
    heads, kv_heads = widths[0] // 8, widths[1] // 8
    return qkv_order(heads, kv_heads, 8, flipped=True)


def test_reference_takes_columns_in_any_order_with_repeats():
    rows, d_in, count, rank, widths = SHAPES[0]
    a_f, b_f, slots, x, base = _case(*SHAPES[0])
    a, b = stack_lora(a_f, b_f, 1.0)
    order = _qkv_columns(widths)
    projection = column_projections(widths, x.device)[order]
    contiguous = routed_lora_torch(x, a, b, slots, widths, base.clone())
    reordered = routed_lora_torch(x, a, b[:, :, order], slots, projection, base[:, order].clone())
    torch.testing.assert_close(reordered, contiguous[:, order], rtol=0, atol=1e-6)


def test_bad_shapes_are_refused_with_the_sizes():
    a_f, b_f, slots, x, base = _case(*SHAPES[0])
    a, b = stack_lora(a_f, b_f, 1.0)
    with pytest.raises(ValueError, match="sum to"):
        routed_lora_torch(x, a, b, slots, (48, 24, 20), base)
    with pytest.raises(ValueError, match="does not fit"):
        routed_lora_torch(x[:, :100], a, b, slots, (48, 24, 24), base)
    with pytest.raises(ValueError, match="integers"):
        routed_lora_torch(x, a, b, slots.float(), (48, 24, 24), base)
    with pytest.raises(ValueError, match="projection indices"):
        routed_lora_torch(x, a, b, slots, torch.zeros(95, dtype=torch.int32), base)


def test_dispatch_takes_the_torch_path_for_cpu_tensors():
    a_f, b_f, slots, x, base = _case(*SHAPES[1])
    a, b = stack_lora(a_f, b_f, 1.0)
    torch.testing.assert_close(
        routed_lora(x, a, b, slots, (128, 128), base.clone()),
        routed_lora_torch(x, a, b, slots, (128, 128), base.clone()),
        rtol=0,
        atol=0,
    )


@pytest.fixture(scope="module")
def kernels():
    yield from kernels_module("evolora.generation.kernels.lora_triton", "_shrink_kernel")


@pytest.mark.parametrize("shape", SHAPES)
def test_triton_matches_the_reference_in_fp32(kernels, shape):
    module, device = kernels
    rows, d_in, count, rank, widths = shape
    a_f, b_f, slots, x, base = _case(*shape, seed=1)
    a, b = (t.to(device) for t in stack_lora(a_f, b_f, 0.5))
    slots, x, base = slots.to(device), x.to(device), base.to(device)
    want = routed_lora_torch(x, a, b, slots, widths, base.clone())
    got = module.routed_lora_triton(x, a, b, slots, widths, base.clone())
    assert (got - want).abs().max().item() <= 1e-5
    assert (want - base).abs().max().item() > 1e-2  # the delta is there to compare
    bare = slots < 0
    assert torch.equal(got[bare], base[bare])  # bare rows: never written
    h = module.lora_shrink(x, a, slots, rank)
    assert torch.equal(h[bare], torch.zeros_like(h[bare]))


def test_triton_reads_strided_inputs_and_writes_into_given_buffers(kernels):
    module, device = kernels
    rows, d_in, count, rank, widths = SHAPES[0]
    a_f, b_f, slots, x, base = _case(*SHAPES[0], seed=2)
    a, b = (t.to(device) for t in stack_lora(a_f, b_f, 1.0))
    wide = torch.randn(rows, 2 * d_in, generator=torch.Generator().manual_seed(3)).to(device)
    x = wide[:, 1::2]  # (M, d_in), strides (2·d_in, 2)
    slots = slots.to(device)
    out = torch.zeros(rows, sum(widths) + 5, device=device)[:, 5:]  # a view, row stride ≠ its width
    hidden = torch.full((rows, len(widths) * rank), float("nan"), device=device)
    want = routed_lora_torch(x.contiguous(), a, b, slots, widths, torch.zeros(rows, sum(widths), device=device))
    module.routed_lora_triton(x, a, b, slots, widths, out, hidden=hidden)
    assert (out - want).abs().max().item() <= 1e-5
    assert not hidden.isnan().any()  # the shrink wrote every row, bare ones as zeros


def test_triton_takes_the_static_steps_qkv_column_order(kernels):
    module, device = kernels
    rows, d_in, count, rank, widths = SHAPES[0]
    a_f, b_f, slots, x, base = _case(*SHAPES[0], seed=6)
    a, b = stack_lora(a_f, b_f, 1.0)
    order = _qkv_columns(widths)
    projection = column_projections(widths, x.device)[order]
    want = routed_lora_torch(x, a, b, slots, widths, base.clone())[:, order]
    b, projection = b[:, :, order].contiguous().to(device), projection.to(device)
    got = module.routed_lora_triton(
        x.to(device), a.to(device), b, slots.to(device), projection, base[:, order].contiguous().to(device)
    )
    assert (got.cpu() - want).abs().max().item() <= 1e-5


def test_triton_all_bare_rows_leave_the_output_untouched(kernels):
    module, device = kernels
    a_f, b_f, slots, x, base = _case(*SHAPES[1], seed=4)
    a, b = (t.to(device) for t in stack_lora(a_f, b_f, 1.0))
    slots = torch.full_like(slots, -1).to(device)
    got = module.routed_lora_triton(x.to(device), a, b, slots, (128, 128), base.clone().to(device))
    assert torch.equal(got.cpu(), base)


def test_triton_rounds_the_delta_once_into_a_half_output(kernels):
    """An fp16 base output (bf16 is truncated by the interpreter): fp32 delta, one rounding, as the torch
    path's ``out.add_(fp32)``; the sums differ in order only, so at most one half-precision step apart."""
    module, device = kernels
    a_f, b_f, slots, x, base = _case(*SHAPES[0], seed=5)
    a, b = (t.to(device) for t in stack_lora(a_f, b_f, 1.0))
    slots, x, base = slots.to(device), x.to(device).half(), base.to(device).half()
    want = routed_lora_torch(x, a, b, slots, (48, 24, 24), base.clone())
    got = module.routed_lora_triton(x, a, b, slots, (48, 24, 24), base.clone())
    step = torch.finfo(torch.float16).eps * want.float().abs().clamp(min=2**-14)
    assert ((got.float() - want.float()).abs() <= step).all()
    assert (got != want).float().mean().item() < 0.05
