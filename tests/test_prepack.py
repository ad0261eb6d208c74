"""The oneDNN-packed LM head and layers: outputs within the set tolerance of ``F.linear`` (fp32, bf16), its
gradient, its fallbacks, the config switch, and rollout vs update log-probs on the tiny models."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from arch_helpers import ARCHITECTURES, tiny_decoder

from evolora.generation.completion import completion_logprobs
from evolora.learner import Sample
from evolora.model.prepack import (
    CHECK_TOLERANCE,
    PackedLinear,
    check_prepack,
    head_linear,
    layer_linears,
    prepack_head,
    prepack_model,
    prepack_supported,
)

DTYPES = [torch.float32, torch.bfloat16]
LOGPROB_TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-3}
"""Max |rollout − update| log-prob (nats) of one token on the tiny models (measured: ≤ 3e-6 in both
dtypes): the KV-cached decode and the one-pass update reassociate sums differently whatever the head does."""


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    yield


def _needs(dtype: torch.dtype) -> None:
    if not prepack_supported(dtype):
        pytest.skip(f"this CPU/torch cannot pack {dtype} (oneDNN ops missing or failing their check)")


def _linear(dtype: torch.dtype, d_out: int = 300, d_in: int = 96) -> torch.nn.Linear:
    generator = torch.Generator().manual_seed(0)
    layer = torch.nn.Linear(d_in, d_out, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(d_out, d_in, generator=generator) * 0.1)
    return layer.to(dtype).requires_grad_(False)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 96), (8, 96), (3, 5, 96)])
def test_packed_output_is_within_tolerance_of_f_linear(dtype, shape):
    _needs(dtype)
    layer = _linear(dtype)
    packed = PackedLinear.from_linear(layer)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    assert packed.uses_pack(x) and packed.weight is layer.weight
    out, reference = packed(x).float(), F.linear(x, layer.weight).float()
    assert out.shape == reference.shape == (*shape[:-1], 300)
    assert (out - reference).abs().max() <= CHECK_TOLERANCE[dtype] * reference.abs().max()


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradient_flows_to_the_input_only(dtype):
    _needs(dtype)
    layer = _linear(dtype)
    packed = PackedLinear.from_linear(layer)
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(4, 7, 96, generator=generator).to(dtype).requires_grad_(True)
    grad_out = torch.randn(4, 7, 300, generator=generator).to(dtype)
    packed(x).backward(grad_out)
    expected = grad_out @ layer.weight
    assert x.grad.shape == x.shape and layer.weight.grad is None
    assert torch.allclose(x.grad.float(), expected.float(), rtol=0, atol=1e-6 if dtype == torch.float32 else 1e-2)


def test_gradient_of_the_packed_head_matches_autograd_through_f_linear():
    _needs(torch.float32)
    layer = _linear(torch.float32, d_out=40, d_in=16)
    packed = PackedLinear.from_linear(layer)
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(3), requires_grad=True)
    x_plain = x.detach().clone().requires_grad_(True)
    packed(x).logsumexp(-1).sum().backward()
    F.linear(x_plain, layer.weight).logsumexp(-1).sum().backward()
    assert torch.allclose(x.grad, x_plain.grad, atol=1e-6)


def test_fallbacks_a_changed_weight_another_dtype_and_a_trained_weight():
    _needs(torch.float32)
    layer = _linear(torch.float32)
    packed = PackedLinear.from_linear(layer)
    x = torch.randn(3, 96, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        layer.weight.mul_(2)  # changed in place: the pack is stale, F.linear answers
    assert not packed.uses_pack(x)
    assert torch.equal(packed(x), F.linear(x, layer.weight))
    packed.repack()
    assert packed.uses_pack(x) and torch.allclose(packed(x), F.linear(x, layer.weight), atol=1e-4)
    assert not packed.uses_pack(x.double())
    layer.weight.requires_grad_(True)
    assert not packed.uses_pack(x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_biased_layer_packs_its_bias_and_a_layer_off_the_cpu_is_refused(dtype):
    _needs(dtype)
    layer = _linear(dtype)
    layer.bias = torch.nn.Parameter(torch.linspace(-1, 1, 300).to(dtype), requires_grad=False)
    packed = PackedLinear.from_linear(layer)
    x = torch.randn(2, 3, 96, generator=torch.Generator().manual_seed(6)).to(dtype)
    out, reference = packed(x).float(), F.linear(x, layer.weight, layer.bias).float()
    assert packed.uses_pack(x) and packed.bias is layer.bias
    assert (out - reference).abs().max() <= CHECK_TOLERANCE[dtype] * reference.abs().max()
    with pytest.raises(ValueError, match="linear layer on the CPU"):
        PackedLinear.from_linear(torch.nn.Linear(4, 3, device="meta"))


def test_auto_packs_large_fp32_heads_only_and_true_packs_a_tied_tiny_head():
    _needs(torch.float32)
    model = tiny_decoder("llama")
    head = model.get_output_embeddings()
    assert not prepack_head(model, "auto")  # 128 × 64 weights: below AUTO_MIN_WEIGHTS
    assert not prepack_head(model, False) and model.get_output_embeddings() is head
    keys = set(model.state_dict())
    assert prepack_head(model, True)
    packed = model.get_output_embeddings()
    assert isinstance(packed, PackedLinear) and packed.weight is head.weight
    assert set(model.state_dict()) == keys  # the packed copy is not saved
    assert head_linear(packed) == packed.linear and head_linear(head) is F.linear
    assert prepack_head(model, True)  # idempotent
    big = torch.nn.Module()
    big.get_output_embeddings = lambda: big.lm_head
    big.set_output_embeddings = lambda module: setattr(big, "lm_head", module)
    big.lm_head = torch.nn.Linear(512, 2048, bias=False).requires_grad_(False)  # 2**20 weights
    assert prepack_head(big, "auto") and isinstance(big.lm_head, PackedLinear)


def test_bad_settings_are_refused_before_a_model_loads():
    from evolora.config import ConfigError, load_config

    with pytest.raises(ValueError, match="model.prepack must be auto, true or false"):
        check_prepack("yes please", "cpu", torch.float32)
    with pytest.raises(ValueError, match="the model goes to cuda"):
        check_prepack(True, "cuda", torch.float32)
    with pytest.raises(ValueError, match="cannot pack a torch.float16 head"):
        check_prepack(True, "cpu", torch.float16)
    assert load_config("tasks/arith.yaml").model.prepack == "auto"
    assert load_config("tasks/arith.yaml", ["model.prepack=false"]).model.prepack is False
    with pytest.raises(ConfigError, match="model.prepack: expected true, false or auto"):
        load_config("tasks/arith.yaml", ["model.prepack=2"])


def _sharp(model_type: str, dtype: torch.dtype = torch.float32):
    """A tiny decoder whose LM head is scaled up, so its log-probs spread over nats (a random
    tiny head is near uniform, where every path agrees to the last bit)."""
    model = tiny_decoder(model_type)
    head = model.get_output_embeddings().weight
    with torch.no_grad():  # a head tied to the embedding (gemma3) scales the inputs too: less
        head.mul_(5 if head is model.get_input_embeddings().weight else 30)
    return model.to(dtype)


def _rollout_and_update(model, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(KV-cached greedy decode's log-probs of its own tokens, the update path's of the same), (B, T_c)."""
    generator = torch.Generator().manual_seed(5)
    prompts = torch.randint(3, 120, (3, 6), generator=generator)
    out = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=False,
        max_new_tokens=6,
        min_new_tokens=6,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=0,
    )
    completions = out.sequences[:, prompts.shape[1] :]
    logits = torch.stack(out.logits, dim=1).float()  # (B, T_c, V)
    rollout = torch.log_softmax(logits, -1).gather(-1, completions[..., None]).squeeze(-1)
    samples = [Sample(tuple(p.tolist()), tuple(c.tolist()), 0.0, "g") for p, c in zip(prompts, completions)]
    update, _ = completion_logprobs(model, samples)
    return rollout, update


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model_type", list(ARCHITECTURES))
def test_rollout_and_update_log_probs_agree_with_the_packed_model(model_type, dtype):
    """Both paths run the model's packed head and layers; they stay within the set tolerance, and
    the packed update path stays as close to the unpacked one."""
    _needs(dtype)
    plain, packed = _sharp(model_type, dtype), _sharp(model_type, dtype)
    assert prepack_model(packed, True) == (True, len(layer_linears(plain)))
    with torch.no_grad():
        rollout, update = _rollout_and_update(packed, dtype)
        plain_rollout, plain_update = _rollout_and_update(plain, dtype)
    assert rollout.shape == update.shape == (3, 6) and rollout.min() < -1.0  # not a uniform head
    assert (rollout - update).abs().max() <= LOGPROB_TOLERANCE[dtype]
    assert (update - plain_update).abs().max() <= LOGPROB_TOLERANCE[dtype]
    assert (rollout - plain_rollout).abs().max() <= LOGPROB_TOLERANCE[dtype]


@pytest.mark.parametrize("path", ["update", "forward"])
def test_gradient_below_the_packed_model_matches_f_linear(path):
    """The gradient to a weight below the head (the final norm's, a stand-in for an adapter) is the
    same through the packed head and layers: on the update path (``token_logprobs``) and through the model's
    own forward (the packed autograd function)."""
    _needs(torch.float32)
    samples = [Sample((5, 6, 7, 8), (9, 10, 11), 0.0, "g"), Sample((12, 13, 4, 3), (14, 15, 16), 0.0, "g")]
    ids = torch.tensor([s.prompt_ids + s.completion_ids for s in samples])
    grads = []
    for pack in (False, True):
        model = _sharp("llama")
        assert prepack_model(model, pack) == ((True, 14) if pack else (False, 0))  # head, 2 × 7 linears
        norm = model.model.norm.weight.requires_grad_(True)
        if path == "update":
            logp, mask = completion_logprobs(model, samples)
            loss = (logp * mask).sum()
        else:
            loss = torch.log_softmax(model(input_ids=ids).logits, -1).gather(-1, ids[:, 1:, None]).sum()
        loss.backward()
        grads.append(norm.grad.clone())
    assert grads[0].abs().max() > 1e-3
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-5)
