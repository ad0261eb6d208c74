"""The graph engine's static prefill equals the eager prefill it replaces: the cache columns each row
attends and the last-position logits (fp32, 1e-5), for every supported layer, with left-padded
prompts of unequal lengths, rows routed to different adapters and to the bare base, and repeated
(prompt, adapter) rows prefilled once; then the engine's greedy tokens equal the eager engine's. The
torch backend on the CPU, and the Triton backend under the interpreter where triton is installed."""

from __future__ import annotations

import pytest
import torch
from arch_helpers import tiny_decoder
from bank_helpers import random_bank
from kernel_helpers import kernels_module

import evolora.generation.kernels as kernels
from evolora.generation.decode import decode
from evolora.generation.graph import GraphDecoder
from evolora.generation.routed import BASE, routed
from evolora.generation.static_prefill import prefill_static, prompt_mask
from evolora.generation.static_step import StaticWeights
from evolora.generation.types import Sampling

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
NAMES = ["A0", BASE, "A1", "A0", "A1", "A0"]


def _batch():
    """Six left-padded prompts of 9, 6, 9, 3, 7, 9 tokens; row 5 repeats row 0 (prompt and adapter)."""
    ids = torch.randint(3, 128, (6, 9), generator=torch.Generator().manual_seed(0))
    attention = torch.ones_like(ids)
    for row, pad in ((1, 3), (3, 6), (4, 2)):
        attention[row, :pad] = 0
        ids[row, :pad] = 0
    ids[5] = ids[0]
    return ids, attention


def _bank(model_type: str):
    return random_bank(tiny_decoder(model_type), ["A0", "A1"], target_modules=MODULES, b_std=0.3)


def _both_prefills(bank, weights=None):
    """(logits, kv) of the eager and the static prefill of :func:`_batch` into fresh buffers."""
    ids, attention = _batch()
    results = []
    for static in (False, True):
        engine = GraphDecoder(bank, static_prefill=static)
        if weights is not None:
            engine.weights = weights
        b = engine._buffers_for(8, 128)
        b.kv.fill_(float("nan"))  # a column the prefill leaves unwritten would show
        logits = engine._prefill(b, ids, attention, NAMES, 8)
        results.append((logits, b.kv[:, :, :6, :, :9].clone()))
    return results, attention.bool()


def _assert_equal_prefills(results, attended, budget=1e-5):
    (eager_logits, eager_kv), (logits, kv) = results
    assert (logits - eager_logits).abs().max() <= budget
    gap = (kv - eager_kv).abs().amax(dim=(0, 1, 3, 5))  # (B, T): per row and column
    assert gap[attended].max() <= budget
    assert torch.isfinite(kv).all()  # pad columns: finite values no row attends
    assert (kv[:, :, 0] - kv[:, :, 5]).abs().max() == 0  # the repeated row: a copy of its first


@pytest.mark.parametrize(
    "model_type, swapped", [("llama", False), ("llama", True), ("qwen2", False), ("qwen3", False), ("mistral", True)]
)
def test_the_static_prefill_equals_the_eager_prefill(model_type, swapped):
    """q/k/v biases (qwen2), q/k norms (qwen3); the q/k/v GEMM with CUDA's halves-swapped copy."""
    bank = _bank(model_type)
    weights = StaticWeights(bank, swapped_copy=swapped)
    assert weights.flipped == (swapped and model_type != "qwen3")
    results, attended = _both_prefills(bank, weights)
    _assert_equal_prefills(results, attended)
    assert (results[0][0][0] - results[0][0][1]).abs().max() > 1e-3  # the rows' adapters differ


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3", "mistral"])
def test_the_graph_engine_with_the_static_prefill_gives_eager_tokens(model_type):
    bank = _bank(model_type)
    ids, attention = _batch()
    sampling, options = Sampling(max_new_tokens=10, greedy=True), dict(eos_ids=set(), pad_id=0, generator=None)
    with torch.no_grad():
        ref = decode(bank.model, ids, attention, NAMES, sampling, context=lambda rows: routed(bank, rows), **options)
    engine = GraphDecoder(bank, check_every=3, static_prefill=True)
    assert not GraphDecoder(bank).static_prefill  # the CPU default: the eager prefill
    assert torch.equal(engine.decode(ids, attention, NAMES, sampling, **options), ref)


def test_the_prompt_mask_and_bad_input():
    attention = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    mask = prompt_mask(attention, group=2)
    assert mask.shape == (2, 1, 8, 4) and torch.equal(mask[:, :, :4], mask[:, :, 4:])
    assert mask[0, 0, :4].tolist() == [
        [True, False, False, False],  # a pad query attends itself only
        [False, True, False, False],
        [False, False, True, False],
        [False, False, True, True],
    ]
    assert torch.equal(mask[1, 0, :4], torch.ones(4, 4, dtype=torch.bool).tril())
    with pytest.raises(ValueError, match="group >= 1"):
        prompt_mask(attention, group=0)
    weights = StaticWeights(_bank("llama"))
    kv = torch.zeros(2, 2, 2, weights.kv_heads, 8, weights.head_dim)
    ids, slots = torch.ones(2, 4, dtype=torch.long), torch.tensor([0, -1])
    with pytest.raises(ValueError, match="left padded"):
        prefill_static(weights, kv, ids, attention.flip(1), slots)
    with pytest.raises(ValueError, match="cache holds"):
        prefill_static(weights, kv[..., :3, :], ids, attention, slots)
    with pytest.raises(ValueError, match="slots must be"):
        prefill_static(weights, kv, ids, attention, slots[:1])


@pytest.fixture(scope="module")
def interpreted():
    yield from kernels_module("evolora.generation.kernels.lora_triton", "_shrink_kernel")


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_the_static_prefill_on_the_triton_backend_equals_the_eager_prefill(interpreted, monkeypatch, model_type):
    """Every group's stacked LoRA by the routed shrink/expand over all B·T positions, silu(gate) · up by
    its kernel (interpreted, fp32): the eager prefill's cache columns and logits."""
    if interpreted[1].type != "cpu":
        pytest.skip("the interpreted check runs on the CPU")
    monkeypatch.setenv(kernels.BACKEND_VARIABLE, "triton")
    bank = _bank(model_type)
    weights = StaticWeights(bank)
    assert weights.kernels == "triton" and weights.fused_mlp
    assert all(g.lora is None or g.lora.backend == "triton" for _, _, groups in weights.layers for g in groups)
    results, attended = _both_prefills(bank, weights)
    _assert_equal_prefills(results, attended)
