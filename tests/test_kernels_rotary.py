"""The rotary + k/v cache write: the torch reference against HF's ``apply_rotary_pos_emb``, and the
Triton kernel against the reference in fp32 under ``TRITON_INTERPRET=1`` (skipped without triton)."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import kernels_module
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from evolora.generation.kernels.rotary_torch import rotary_kv_write_torch

SHAPES = [(3, 2, 3, 16), (5, 3, 1, 64), (2, 1, 6, 8)]  # (rows R, key/value heads, query heads per kv head G, D)


def _case(rows, heads, group, dim, seed=0):
    """y (R, H_kv, G + 2, D) as a strided view (the static step's layout), HF's cos/sin (R, D), a cache."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(rows, 2, heads, group + 2, dim, generator=g)[:, 0]
    position = torch.randint(0, 500, (rows,), generator=g).float()
    inverse = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
    angles = torch.cat([position[:, None] * inverse] * 2, dim=-1)  # (R, D)
    kv = torch.randn(2, rows, heads, 12, dim, generator=g)
    return y, angles.cos(), angles.sin(), kv, torch.tensor([7])


@pytest.mark.parametrize("shape", SHAPES)
def test_reference_is_hf_rotary_with_the_cache_write(shape):
    rows, heads, group, dim = shape
    y, cos, sin, kv, column = _case(*shape)
    before = kv.clone()
    q = rotary_kv_write_torch(y, cos, sin, kv, column, scale=0.125)
    hf_q, hf_k = apply_rotary_pos_emb(
        y[:, :, 2:].reshape(rows, heads * group, 1, dim),
        y[:, :, :1].reshape(rows, heads, 1, dim),
        cos[:, None],
        sin[:, None],
    )
    assert torch.equal(q, hf_q.view(rows, heads, group, dim) * 0.125)  # 1/8: folded exactly
    assert torch.equal(kv[0, :, :, 7], hf_k[:, :, 0]) and torch.equal(kv[1, :, :, 7], y[:, :, 1])
    kv[:, :, :, 7] = before[:, :, :, 7]
    assert torch.equal(kv, before)  # no other column written


def test_bad_shapes_are_refused():
    y, cos, sin, kv, column = _case(*SHAPES[0])
    with pytest.raises(ValueError, match="cos and sin"):
        rotary_kv_write_torch(y, cos[:, :8], sin, kv, column)
    with pytest.raises(ValueError, match="kv must be"):
        rotary_kv_write_torch(y, cos, sin, kv[:, :2], column)
    with pytest.raises(ValueError, match="G >= 1"):
        rotary_kv_write_torch(y[:, :, :2], cos, sin, kv, column)


@pytest.fixture(scope="module")
def rotary():
    yield from kernels_module("evolora.generation.kernels.rotary_triton", "_rotary_kernel")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("scale", [1.0, 0.125, 0.3])
def test_triton_matches_the_reference_in_fp32(rotary, shape, scale):
    module, device = rotary
    y, cos, sin, kv, column = (t.to(device) for t in _case(*shape, seed=1))
    want_kv = kv.clone()
    want = rotary_kv_write_torch(y, cos, sin, want_kv, column, scale=scale)
    got = module.rotary_kv_write(y, cos, sin, kv, column, scale=scale)
    assert (got - want).abs().max().item() <= 1e-6
    assert (kv - want_kv).abs().max().item() <= 1e-6
    assert torch.equal(kv[1], want_kv[1])  # v copied exactly, other columns untouched


def test_triton_refuses_a_head_size_that_is_not_a_power_of_two(rotary):
    module, device = rotary
    y, cos, sin, kv, column = (t.to(device) for t in _case(2, 1, 2, 12))
    with pytest.raises(ValueError, match="power-of-two"):
        module.rotary_kv_write(y, cos, sin, kv, column)
