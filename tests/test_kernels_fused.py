"""The fused SiLU·mul and the flash-decode attention: each torch reference against the plain math
(HF's activation; attention per head with the key/value heads repeated), each Triton kernel against
its reference in fp32 under ``TRITON_INTERPRET=1`` (skipped without triton), and the static step
with both kernels wired against the same step without them, on left-padded rows of unequal lengths."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import kernels_module
from transformers.activations import ACT2FN

from evolora.generation.kernels.attention_torch import decode_attention_torch, row_bounds
from evolora.generation.kernels.silu_mul_torch import silu_mul_torch

# (rows R, key/value heads, query heads per key/value head G, head size D, window W): GQA ratios 1, 3, 4
ATTENTION = [(4, 2, 1, 16, 40), (3, 2, 3, 16, 70), (5, 1, 4, 64, 23), (2, 3, 4, 12, 9)]


def _attention_case(rows, heads, group, dim, window, seed=0):
    """q, k and v as views of a larger cache (the step's strides), and a mask of unequal rows: each row
    left-padded, filled to its own end, one with a hole, one attending a single column."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(rows, heads, group + 2, dim, generator=g)[:, :, 2:]
    cache = torch.randn(2, rows, heads, window + 5, dim, generator=g)
    valid = torch.zeros(rows, window, dtype=torch.bool)
    for r in range(rows):
        start = int(torch.randint(0, window // 2 + 1, (1,), generator=g))
        valid[r, start : int(torch.randint(start + 1, window + 1, (1,), generator=g))] = True
    valid[0, : window // 2], valid[0, window // 2 :] = False, True  # padded to half the window, filled to its end
    valid[-1] = False
    valid[-1, window - 1] = True  # one attended column
    if window > 4:
        valid[1, 1:] = True
        valid[1, window // 3] = False  # a hole
    return q, cache[0, :, :, :window], cache[1, :, :, :window], valid


def test_silu_mul_reference_is_hfs_activation_times_up():
    y = torch.randn(5, 2 * 24, generator=torch.Generator().manual_seed(0)) * 3
    assert torch.equal(silu_mul_torch(y), ACT2FN["silu"](y[:, :24]) * y[:, 24:])
    with pytest.raises(ValueError, match="gate then the up"):
        silu_mul_torch(y[:, :7])


@pytest.mark.parametrize("shape", ATTENTION)
def test_attention_reference_is_per_head_softmax_with_repeated_kv(shape):
    q, k, v, valid = _attention_case(*shape)
    rows, heads, group, dim = q.shape
    got = decode_attention_torch(q, k, v, valid, 0.3)
    # HF's eager attention: k/v heads repeated G times, scores scaled, masked, softmax, times v
    keys, values = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (R, H_q, W, D)
    scores = torch.einsum("rhd,rhwd->rhw", q.reshape(rows, heads * group, dim), keys) * 0.3
    probs = scores.masked_fill(~valid[:, None, :], -float("inf")).softmax(dim=-1)
    want = torch.einsum("rhw,rhwd->rhd", probs, values).view(rows, heads, group, dim)
    assert (got - want).abs().max().item() <= 1e-6


def test_row_bounds_cover_each_rows_attended_columns():
    valid = torch.zeros(4, 10, dtype=torch.bool)
    valid[0, 3:10], valid[1, :4], valid[2, [2, 5, 7]] = True, True, True
    assert row_bounds(valid).tolist() == [[3, 10], [0, 4], [2, 8], [0, 0]]
    assert row_bounds(valid).dtype == torch.int32


@pytest.fixture(scope="module")
def silu_mul_kernel():
    yield from kernels_module("evolora.generation.kernels.silu_mul_triton", "_silu_mul_kernel")


@pytest.fixture(scope="module")
def attention_kernel():
    yield from kernels_module("evolora.generation.kernels.attention_triton", "_decode_attention_kernel")


@pytest.mark.parametrize("rows, width", [(1, 8), (5, 48), (3, 1100)])
def test_triton_silu_mul_matches_the_reference_in_fp32(silu_mul_kernel, rows, width):
    module, device = silu_mul_kernel
    y = (torch.randn(rows, 2 * width + 3, generator=torch.Generator().manual_seed(width)) * 2)[:, 3:].to(device)
    want = silu_mul_torch(y)
    assert (module.silu_mul(y) - want).abs().max().item() <= 1e-5
    out = torch.full((rows, width), float("nan"), device=device)
    assert module.silu_mul(y, out=out) is out and (out - want).abs().max().item() <= 1e-5
    with pytest.raises(ValueError, match="out must be"):
        module.silu_mul(y, out=out[:, 1:])


@pytest.mark.parametrize("shape", ATTENTION)
@pytest.mark.parametrize("scale", [1.0, 0.125, 0.3])
def test_triton_attention_matches_the_reference_in_fp32(attention_kernel, shape, scale):
    module, device = attention_kernel
    q, k, v, valid = (t.to(device) for t in _attention_case(*shape, seed=1))
    want = decode_attention_torch(q, k, v, valid, scale)
    got = module.decode_attention(q, k, v, valid, row_bounds(valid), scale)
    assert got.shape == want.shape and (got - want).abs().max().item() <= 1e-5


def test_triton_attention_reads_only_between_each_rows_bounds(attention_kernel):
    """Columns outside a row's bounds, or masked inside them, may hold anything (NaN here): never read."""
    module, device = attention_kernel
    q, k, v, valid = (t.to(device) for t in _attention_case(3, 2, 3, 16, 30, seed=2))
    want = decode_attention_torch(q, k, v, valid, 0.25)
    k, v = k.masked_fill(~valid[:, None, :, None], float("nan")), v.masked_fill(~valid[:, None, :, None], float("nan"))
    assert (module.decode_attention(q, k, v, valid, row_bounds(valid), 0.25) - want).abs().max().item() <= 1e-5
    with pytest.raises(ValueError, match="bounds must be"):
        module.decode_attention(q, k, v, valid, row_bounds(valid)[:, :1], 0.25)
    with pytest.raises(ValueError, match="valid must be"):
        module.decode_attention(q, k, v, valid[:, 1:], row_bounds(valid), 0.25)


def test_the_cpu_step_keeps_the_torch_path():
    from arch_helpers import tiny_decoder
    from bank_helpers import random_bank

    from evolora.generation.kernels import kernel_backend
    from evolora.generation.static_step import StaticWeights

    bank = random_bank(tiny_decoder("llama"), ["A0"], target_modules=("q_proj", "gate_proj"), b_std=0.3)
    w = StaticWeights(bank)
    assert kernel_backend("cpu") == "torch" and w.kernels == "torch"
    assert not w.fused_mlp and not w.flash_decode and w.mlp_kernel is None and w.attention_kernel is None


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_the_step_with_both_kernels_equals_the_step_without(silu_mul_kernel, attention_kernel, model_type):
    """Triton backend, fp32, interpreted: the static step with the fused SiLU·mul and the flash-decode
    attention gives the logits and cache of the same step with the torch SiLU·mul and attention, over
    four steps of rows left-padded to different lengths."""
    from arch_helpers import tiny_decoder
    from bank_helpers import random_bank

    from evolora.generation.static_cache import StaticBuffers
    from evolora.generation.static_step import StaticWeights, decode_step

    if silu_mul_kernel[1].type != "cpu":
        pytest.skip("the interpreted check runs on the CPU")
    bank = random_bank(tiny_decoder(model_type), ["A0", "A1"], target_modules=("q_proj", "up_proj"), b_std=0.3)
    steps = {fused: StaticWeights(bank, kernels="triton", fused_mlp=fused, flash_decode=fused) for fused in (1, 0)}
    assert steps[1].fused_mlp and steps[1].flash_decode and not steps[0].fused_mlp and not steps[0].flash_decode
    g = torch.Generator().manual_seed(3)
    buffers = {}
    for fused, w in steps.items():
        b = buffers[fused] = StaticBuffers(w, 4, 24)
        b.kv[..., :9, :] = torch.randn(b.kv[..., :9, :].shape, generator=torch.Generator().manual_seed(4))
        b.valid[:, :9] = True
        b.valid[1, :5] = b.valid[2, :2] = b.valid[3, :8] = False  # left padding: 4, 7, 1 and 9 filled columns
        b.onehot[[0, 2, 3], [0, 1, 0]] = 1.0
    tokens = torch.randint(0, 128, (4, 4), generator=g)
    for t in range(4):
        logits = {}
        for fused, w in steps.items():
            b = buffers[fused]
            position, column = torch.tensor([9, 4, 7, 1]) + t, torch.tensor([9 + t])
            logits[fused] = decode_step(w, tokens[:, t], position, column, b.kv, b.valid, b.onehot, 16)
        assert (logits[1] - logits[0]).abs().max().item() <= 1e-5
        assert (buffers[1].kv - buffers[0].kv).abs().max().item() <= 1e-5


def test_the_backends_feature_test_runs_both_new_kernels(silu_mul_kernel, attention_kernel, monkeypatch):
    """The one-off device test (interpreted here) passes, and fails on a SiLU·mul that is off."""
    import evolora.generation.kernels as kernels

    module, device = silu_mul_kernel
    kernels.feature_test(device)
    monkeypatch.setattr(module, "silu_mul", lambda y, out=None: silu_mul_torch(y) + 1e-3)
    with pytest.raises(AssertionError, match="SiLU·mul"):
        kernels.feature_test(device)
