"""The decoder's packed linears (``model.prepack``): which layers ``auto`` and ``true`` pack, the
memory rule, and routed adapters over packed layers: the same log-probs and adapter gradients as
over ``F.linear``, train and rollout paths alike."""

from __future__ import annotations

import pytest
import torch
from arch_helpers import ARCHITECTURES, tiny_decoder
from bank_helpers import random_bank

import evolora.model.prepack as prepack
from evolora.generation.routed import routed
from evolora.learner import Sample, completion_logprobs
from evolora.model.prepack import PackedLinear, layer_linears, prepack_layers, prepack_supported

SAMPLES = [Sample((5, 6, 7, 8), (9, 10, 11), 0.0, "g"), Sample((12, 13, 4, 3), (14, 15, 16), 0.0, "g")]


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    if not prepack_supported(torch.float32):
        pytest.skip("this CPU/torch cannot pack float32 weights")
    yield


def _packed_count(model) -> int:
    return sum(isinstance(m, PackedLinear) for m in model.modules())


def test_true_packs_every_frozen_linear_but_the_head_and_auto_skips_small_ones():
    model = tiny_decoder("llama")
    keys, head = set(model.state_dict()), model.get_output_embeddings()
    assert prepack_layers(model, "auto") == 0  # 64 × 128 weights each: below AUTO_MIN_LAYER_WEIGHTS
    assert prepack_layers(model, False) == 0 and _packed_count(model) == 0
    assert prepack_layers(model, True) == 14  # 2 layers × q, k, v, o, gate, up, down
    assert _packed_count(model) == 14 and model.get_output_embeddings() is head
    assert set(model.state_dict()) == keys  # the packed copies are not saved
    assert prepack_layers(model, True) == 0 and _packed_count(model) == 14  # nothing left to pack


def _wide() -> torch.nn.Module:
    model = torch.nn.Module()
    model.block = torch.nn.Sequential(torch.nn.Linear(512, 512, bias=False), torch.nn.Linear(512, 64))
    return model.requires_grad_(False)  # 2**18 weights: packed by auto; 512 × 64: below the floor


def test_auto_packs_layers_only_where_their_copies_fit_the_memory_share(monkeypatch):
    copies = 512 * 512 * 4
    monkeypatch.setattr(prepack, "_available_bytes", lambda: int(copies / prepack.MEMORY_SHARE) - 1)
    assert prepack_layers(_wide(), "auto") == 0
    monkeypatch.setattr(prepack, "_available_bytes", lambda: int(copies / prepack.MEMORY_SHARE) + 1)
    model = _wide()
    assert prepack_layers(model, "auto") == 1 and isinstance(model.block[0], PackedLinear)
    assert type(model.block[1]) is torch.nn.Linear
    assert prepack_layers(_wide().to(torch.bfloat16), "auto") == 0  # auto packs float32 only
    trained = _wide()
    trained.block[0].weight.requires_grad_(True)
    assert [name for name, _ in layer_linears(trained)] == ["block.1"]  # a trained weight is not frozen


def _bank(model_type: str, pack: bool):
    model = tiny_decoder(model_type)
    if pack:
        assert prepack_layers(model, True) == len(layer_linears(tiny_decoder(model_type)))
    return random_bank(model, ["A0", "A1"], target_modules="all-linear", b_std=0.2, seed=3)


@pytest.mark.parametrize("model_type", list(ARCHITECTURES))
def test_routed_adapters_over_packed_layers_give_the_same_log_probs(model_type):
    banks = [_bank(model_type, pack) for pack in (False, True)]
    logps = []
    for bank in banks:
        with torch.no_grad(), routed(bank, ["A0", "A1"]):
            logps.append(completion_logprobs(bank.model, SAMPLES)[0])
    assert logps[0].shape == (2, 3) and logps[0].min() < -1.0
    assert (logps[0] - logps[1]).abs().max() <= 1e-5


def test_the_update_gradient_to_adapter_factors_is_the_same_over_packed_layers():
    grads = []
    for pack in (False, True):
        bank = _bank("qwen2", pack)  # biased q/k/v: the bias goes through the packed op
        params = bank.parameters("A0")
        with routed(bank, ["A0", "A0"], train=True):
            logp, mask = completion_logprobs(bank.model, SAMPLES)
        (logp * mask).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in params]))
    assert grads[0].abs().max() > 1e-3
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-6)
