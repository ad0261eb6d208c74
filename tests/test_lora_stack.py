"""The stacked-LoRA layer: each layout adds the same routed delta, the per-row ΔW·x of its slot
(none for slot −1), to ~1e-6 in fp32; under a bf16 output the fp32 delta is rounded once."""

from __future__ import annotations

import pytest
import torch

from evolora.generation import lora_stack
from evolora.generation.lora_stack import DenseStack, GatheredStack, RowPlan, masked_delta_, slot_onehot

P, R, D_IN, WIDTHS, SCALE = 3, 4, 16, (8, 4, 4), 2.0


def _factors(generator):
    """[p][j] A (r, d_in) and B (d_j, r) of P slots and the G = 3 siblings of WIDTHS."""
    a = [[torch.randn(R, D_IN, generator=generator) for _ in WIDTHS] for _ in range(P)]
    b = [[torch.randn(width, R, generator=generator) for width in WIDTHS] for _ in range(P)]
    return a, b


def _reference(x, a, b, slots):
    """(M, D) per row: s · B_j[slot] A_j[slot] x in float64 (zero for slot −1), siblings side by side."""
    rows = []
    for m, slot in enumerate(slots.tolist()):
        if slot < 0:
            rows.append(torch.zeros(sum(WIDTHS), dtype=torch.float64))
            continue
        rows.append(
            torch.cat(
                [SCALE * (b[slot][j].double() @ (a[slot][j].double() @ x[m].double())) for j in range(len(WIDTHS))]
            )
        )
    return torch.stack(rows)


def _close(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal up to fp32 rounding: within 1e-6 of the largest magnitude (summation order only)."""
    got, want = got.double(), want.double()
    return bool((got - want).abs().max() <= 1e-6 * want.abs().max().clamp(min=1.0))


@pytest.fixture
def case():
    generator = torch.Generator().manual_seed(0)
    a, b = _factors(generator)
    x = torch.randn(7, D_IN, generator=generator)
    slots = torch.tensor([2, -1, 0, 2, 1, -1, 0])
    base = torch.randn(7, sum(WIDTHS), generator=generator)
    return a, b, x, slots, base


def _dense(a, b, slots_count=P):
    stack = DenseStack(slots_count, len(WIDTHS), R, D_IN, sum(WIDTHS), dtype=torch.float32, device=torch.device("cpu"))
    offsets = [sum(WIDTHS[:j]) for j in range(len(WIDTHS))]
    for p in range(slots_count):
        block = torch.zeros(len(WIDTHS) * R, sum(WIDTHS))
        for j, width in enumerate(WIDTHS):
            block[j * R : (j + 1) * R, offsets[j] : offsets[j] + width] = b[p][j].t() * SCALE
        stack.write_(p, a[p], block)
    return stack


def test_the_dense_stack_adds_each_rows_own_delta(case):
    a, b, x, slots, base = case
    out = _dense(a, b).add_(base.clone(), x, slot_onehot(slots, P))
    assert _close(out.double(), base.double() + _reference(x, a, b, slots))
    assert torch.equal(_dense(a, b).add_(base.clone(), x, slots), out)  # slot ids or their one-hot


def test_the_dense_stack_reorders_columns_and_rewrites_in_place(case):
    a, b, x, slots, base = case
    order = torch.randperm(sum(WIDTHS), generator=torch.Generator().manual_seed(1))
    stack = DenseStack(P, len(WIDTHS), R, D_IN, sum(WIDTHS), dtype=torch.float32, device=torch.device("cpu"))
    stack.reorder(order)
    address = stack.b.data_ptr()
    plain = _dense(a, b)
    for p in range(P):
        stack.write_(p, a[p], plain.b[p * len(WIDTHS) * R : (p + 1) * len(WIDTHS) * R])
    assert stack.b.data_ptr() == address
    out = stack.add_(base[:, order].clone(), x, slot_onehot(slots, P))
    want = plain.add_(base.clone(), x, slot_onehot(slots, P))[:, order]
    assert _close(out, want)


@pytest.mark.parametrize("layout", ["gathered", "dense"])
@pytest.mark.parametrize("order", ["grouped", "mixed"])
def test_the_gathered_stack_equals_the_reference_grouped_or_not(case, order, layout, monkeypatch):
    """Both layouts: the gather + batched matmuls, and the dense one of a decoding step (at most
    DENSE_ROWS rows × tokens; base rows and uneven groups included)."""
    monkeypatch.setattr(lora_stack, "DENSE_ROWS", 16 if layout == "dense" else 0)
    a, b, x, slots, base = case
    if order == "grouped":  # equal groups in slot order: x is viewed, not gathered
        slots, x, base = torch.tensor([0, 0, 1, 1, 2, 2]), x[:6], base[:6]
    used = sorted(set(slots.tolist()) - {-1})
    plan = RowPlan(slots, used, R, SCALE)
    assert plan.identity == (order == "grouped")
    stack = GatheredStack([a[p] for p in used], [b[p] for p in used], plan)
    out = base.clone().view(len(slots), 1, -1)
    pieces = stack.shrink(x.view(len(slots), 1, D_IN), 1)
    assert all(piece.dim() == (2 if layout == "dense" else 3) for piece in pieces)
    start = 0
    for j, width in enumerate(WIDTHS):
        part = out[:, :, start : start + width].contiguous()
        stack.expand_(part, pieces[j], j)
        out[:, :, start : start + width] = part
        start += width
    want = base.double() + _reference(x, a, b, slots)
    assert _close(out.view(len(slots), -1).double(), want)


def test_the_masked_delta_equals_the_reference_and_keeps_the_graph(case):
    a, b, x, slots, base = case
    used = sorted(set(slots.tolist()) - {-1})
    position = {slot: k for k, slot in enumerate(used)}
    outs = []
    for j, width in enumerate(WIDTHS):
        a_cat = torch.cat([a[p][j] for p in used]).requires_grad_()
        b_cat = torch.cat([b[p][j] for p in used], dim=1).requires_grad_()
        mask = torch.zeros(len(slots), 1, len(used) * R)
        for m, slot in enumerate(slots.tolist()):
            if slot >= 0:
                mask[m, 0, position[slot] * R : (position[slot] + 1) * R] = SCALE
        start = sum(WIDTHS[:j])
        out = masked_delta_(base[:, None, start : start + width].clone(), x[:, None], a_cat, b_cat, mask)
        out.sum().backward()
        assert a_cat.grad is not None and b_cat.grad is not None
        outs.append(out.detach()[:, 0])
    want = base.double() + _reference(x, a, b, slots)
    assert _close(torch.cat(outs, dim=1).double(), want)


def test_a_bf16_output_gets_the_fp32_delta_rounded_once(case):
    """Every layout computes in the factors' fp32 and rounds the sum into the bf16 output once."""
    a, b, x, slots, base = case
    bf16 = base.to(torch.bfloat16)
    want = (bf16.float() + _reference(x.to(torch.bfloat16).float(), a, b, slots).float()).to(torch.bfloat16)
    dense = _dense(a, b).add_(bf16.clone(), x.to(torch.bfloat16), slot_onehot(slots, P))
    assert dense.dtype == torch.bfloat16
    assert (dense.float() - want.float()).abs().max() <= 2**-7 * want.float().abs().max()
