"""Routed multi-adapter LoRA gives the same generations, log-probs and updates as PEFT one adapter at a time."""

from __future__ import annotations

import pytest
import torch
from bank_helpers import random_bank

from evolora.bank.local import AdapterBank
from evolora.generation.engine import EagerEngine, PeftEngine
from evolora.generation.rollout import chat_prompt
from evolora.generation.routed import BASE, routed
from evolora.generation.types import Sampling
from evolora.learner import Sample, completion_logprobs, make_optimizer, policy_update_many
from evolora.model import load_base

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture
def bank(tiny):
    model, _ = tiny
    bank = random_bank(model, ["A0", "A1", "A2"], target_modules=MODULES, b_std=0.3)
    return bank


def _peft_logprobs(bank, slot, samples):
    bank.model.set_adapter(slot)
    with torch.no_grad():
        return completion_logprobs(bank.model, samples)[0]


SAMPLES = [
    Sample((5, 6, 7, 8), (10, 11, 2), 1.0, "g"),
    Sample((12, 13), (14, 15, 16, 2), 0.0, "g"),
    Sample((20, 21, 22), (23, 2), 0.5, "h"),
    Sample((30,), (31, 32), -1.0, "h"),
]


def test_routed_logprobs_equal_peft_per_adapter(bank):
    names = ["A0", "A1", BASE, "A2"]
    with torch.no_grad(), routed(bank, names):
        logp, mask = completion_logprobs(bank.model, SAMPLES)
    for row, name in enumerate(names):
        if name == BASE:
            with torch.no_grad(), bank.model.disable_adapter():
                ref = completion_logprobs(bank.model, [SAMPLES[row]])[0]
        else:
            ref = _peft_logprobs(bank, name, [SAMPLES[row]])
        n = len(SAMPLES[row].completion_ids)
        assert torch.allclose(logp[row, :n], ref[0, :n], atol=1e-5), name


def test_routed_generation_equals_peft(bank, tiny):
    _, tokenizer = tiny
    prompts = [chat_prompt(tokenizer, [{"role": "user", "content": t}]) for t in ("a", "bb", "what?", "1+1")]
    names = ["A0", "A1", "A2", BASE]
    greedy = Sampling(max_new_tokens=10, greedy=True)
    ours = EagerEngine(bank.model, tokenizer, bank).generate(prompts, names, greedy)
    peft = PeftEngine(bank.model, tokenizer, bank).generate(prompts, names, greedy)
    assert [c.completion_ids for c in ours] == [c.completion_ids for c in peft]


def test_batched_update_equals_sequential_updates():
    def fresh():
        model, _ = load_base("tiny-random")  # the same seed: identical weights each time
        bank = random_bank(model, ["A0", "A1"], target_modules=("q_proj", "v_proj"), b_std=0.3)
        return bank

    jobs_samples = {"A0": SAMPLES[:2], "A1": SAMPLES[2:]}
    bank = fresh()
    optimizers = {s: make_optimizer(bank.parameters(s), lr=1e-2, weight_decay=0.0) for s in bank.slots}
    together = policy_update_many(bank, {s: (optimizers[s], jobs_samples[s]) for s in bank.slots}, micro_batch=3)
    batched = {s: bank.get_factors(s) for s in bank.slots}

    bank = fresh()
    optimizers = {s: make_optimizer(bank.parameters(s), lr=1e-2, weight_decay=0.0) for s in bank.slots}
    alone = {s: policy_update_many(bank, {s: (optimizers[s], jobs_samples[s])}, micro_batch=3)[s] for s in bank.slots}
    for slot in bank.slots:
        assert together[slot].loss == pytest.approx(alone[slot].loss, abs=1e-5)
        factors = bank.get_factors(slot)
        for module in factors:
            assert torch.allclose(factors[module][0], batched[slot][module][0], atol=1e-6)
            assert torch.allclose(factors[module][1], batched[slot][module][1], atol=1e-6)
        assert not torch.equal(factors[module][1], torch.zeros_like(factors[module][1]))


# Row layouts of the routed paths: padded groups + base rows, grouped in equal groups (no gather), one adapter.
LAYOUTS = [["A1", "A0", BASE, "A1", "A2", "A1"], ["A0", "A0", "A2", "A2"], ["A2", BASE, "A2"]]


def _per_row_reference(bank, ids, names):
    """Logits of each row alone through PEFT with its own adapter (or the base), (N, T, V)."""
    rows = []
    for row, name in enumerate(names):
        if name == BASE:
            with bank.model.disable_adapter():
                rows.append(bank.model(input_ids=ids[row : row + 1]).logits)
        else:
            bank.model.set_adapter(name)
            rows.append(bank.model(input_ids=ids[row : row + 1]).logits)
    return torch.cat(rows)


@pytest.mark.parametrize("names", LAYOUTS)
@pytest.mark.parametrize("tokens", [1, 5])
def test_routed_forward_equals_peft_per_row(bank, names, tokens):
    """One token per row (a decoding step) and several, for every row layout."""
    ids = torch.randint(3, 60, (len(names), tokens), generator=torch.Generator().manual_seed(tokens))
    with torch.no_grad():
        with routed(bank, names):
            ours = bank.model(input_ids=ids).logits
        ref = _per_row_reference(bank, ids, names)
    assert torch.allclose(ours, ref, atol=1e-5), (ours - ref).abs().max()


def _close(got, want, tol=1e-5):
    """Equal up to float32 reassociation: max error <= tol relative to the largest entry (at least 1)."""
    return bool((got - want).abs().max() <= tol * max(1.0, float(want.abs().max())))


def _routed_grads(bank, ids, names, weights):
    params = [p for slot in bank.slots for p in bank.parameters(slot)]
    for p in params:
        p.requires_grad_(True)
    try:
        with routed(bank, names, train=True):
            logits = bank.model(input_ids=ids).logits
        grads = torch.autograd.grad((logits * weights).sum(), params, allow_unused=True)
        return [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
    finally:
        for p in params:
            p.requires_grad_(False)


@pytest.mark.parametrize("names", LAYOUTS)
@pytest.mark.parametrize("tokens", [1, 5])
def test_routed_gradients_equal_peft_per_row(bank, names, tokens):
    """train=True: each adapter's gradient is the sum of its rows' gradients, base rows give none."""
    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(3, 60, (len(names), tokens), generator=gen)
    weights = torch.randn(len(names), tokens, bank.model.config.vocab_size, generator=gen)
    bank.model.train()
    try:
        ours = _routed_grads(bank, ids, names, weights)
        ref = []
        for slot in bank.slots:
            params = bank.parameters(slot)
            bank.activate(slot)
            rows = [i for i, name in enumerate(names) if name == slot]
            if rows:
                logits = bank.model(input_ids=ids[rows]).logits
                ref += torch.autograd.grad((logits * weights[rows]).sum(), params)
            else:
                ref += [torch.zeros_like(p) for p in params]
            for p in params:
                p.requires_grad_(False)
    finally:
        bank.model.eval()
    for got, want in zip(ours, ref):
        assert _close(got, want), (got - want).abs().max()


@pytest.mark.parametrize("names", LAYOUTS)
@pytest.mark.parametrize("tokens", [1, 5])
def test_shared_input_siblings_equal_unshared(bank, monkeypatch, names, tokens):
    """Inference: q/k/v and gate/up sharing one gather and matmul equal one matmul per layer (1e-5)."""
    import evolora.generation.routed as routed_module

    ids = torch.randint(3, 60, (len(names), tokens), generator=torch.Generator().manual_seed(3))
    assert any(len(group) > 1 for group in routed_module._sibling_groups(bank.layers))
    with torch.no_grad(), routed(bank, names):
        fused = bank.model(input_ids=ids).logits
    monkeypatch.setattr(routed_module, "SHARED_INPUT", ())
    assert all(len(group) == 1 for group in routed_module._sibling_groups(bank.layers))
    with torch.no_grad(), routed(bank, names):
        alone = bank.model(input_ids=ids).logits
    assert torch.allclose(fused, alone, atol=1e-5), (fused - alone).abs().max()


def test_all_base_rows_add_no_hooks(bank):
    with routed(bank, [BASE, BASE]):
        assert not any(layer.base_layer._forward_hooks for layer in bank.layers.values())


def test_sibling_with_another_input_computes_its_own(bank):
    """Sharing is keyed on the input tensor object: k_proj fed another tensor than q_proj is not fooled."""
    names = LAYOUTS[0]
    q = bank.layers["model.layers.0.self_attn.q_proj"]
    k = bank.layers["model.layers.0.self_attn.k_proj"]
    gen = torch.Generator().manual_seed(5)
    x1, x2 = (torch.randn(len(names), 3, q.in_features, generator=gen) for _ in range(2))
    with torch.no_grad():
        with routed(bank, names):
            q(x1)
            mixed = k(x2)
        with routed(bank, names):
            alone = k(x2)
    assert torch.equal(mixed, alone)


def test_bfloat16_base_matches_peft_per_row():
    """A bf16 base with fp32 factors takes the unfused path (delta in fp32, added in bf16)."""
    model, _ = load_base("tiny-random", dtype="bfloat16")
    bank = AdapterBank(model, ["A0", "A1"], rank=4, alpha=8, target_modules=MODULES)
    generator = torch.Generator().manual_seed(0)
    for slot in bank.slots:
        bank.init_factors(slot, generator, b_std=0.3)
    names = ["A1", BASE, "A0", "A1"]
    ids = torch.randint(3, 60, (len(names), 4), generator=generator)
    with torch.no_grad():
        with routed(bank, names):
            ours = bank.model(input_ids=ids).logits.float()
        ref = _per_row_reference(bank, ids, names).float()
    assert _close(ours, ref, tol=3e-2), (ours - ref).abs().max()


@pytest.mark.parametrize("engine", ["eager", "peft"])
def test_an_engine_with_another_model_than_its_banks_is_refused(bank, tiny, engine):
    from evolora.generation.engine import make_engine

    other, tokenizer = tiny  # the bare base: not the bank's PEFT model
    with pytest.raises(ValueError, match="bank.model"):
        make_engine(engine, other, tokenizer, bank)
    (out,) = make_engine(engine, bank.model, tokenizer, bank).generate([[5, 6]], ["A0"], Sampling(max_new_tokens=2))
    assert 1 <= len(out.completion_ids) <= 2


def test_a_bank_without_a_tokenizer_scores_but_does_not_generate(bank):
    assert bank.logprobs(["A0"], SAMPLES[:1]).shape == (1, 3)
    with pytest.raises(ValueError, match="built without a tokenizer"):
        bank.rollout([[5, 6]], ["A0"], Sampling(max_new_tokens=2))


def test_lora_delta_of_a_bf16_input_keeps_it_and_equals_autograd_through_the_cast():
    """The training delta of a bf16 input: the same value and gradients (x, A, B) as autograd
    through x.to(float32), to ~1e-6, with only x itself (bf16) kept for backward, no fp32 copy."""
    from evolora.generation.lora_stack import LoraDelta

    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, generator=g).to(torch.bfloat16).requires_grad_()
    a = torch.randn(8, 16, generator=g, requires_grad=True)  # P·r = 2 adapters × rank 4
    b = torch.randn(12, 8, generator=g, requires_grad=True)
    mask = torch.zeros(3, 1, 8)
    mask[0, :, :4] = mask[1, :, 4:] = 2.0  # row 2 is a base row
    upstream = torch.randn(3, 5, 12, generator=g)
    want = torch.matmul(torch.matmul(x.to(torch.float32), a.t()) * mask, b.t())
    want_grads = torch.autograd.grad(want, (x, a, b), upstream)
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        got = LoraDelta.apply(x, a, b, mask)
    assert not any(t.dtype == torch.float32 and t.shape == x.shape for t in kept)
    assert any(t is x or t.data_ptr() == x.data_ptr() for t in kept)
    got_grads = torch.autograd.grad(got, (x, a, b), upstream)
    assert torch.allclose(got, want, atol=1e-6, rtol=1e-6) and got.dtype == torch.float32
    assert torch.equal(got_grads[0], want_grads[0])  # both rounded once to bf16
    for got_grad, want_grad in zip(got_grads[1:], want_grads[1:]):
        assert torch.allclose(got_grad, want_grad, atol=1e-5, rtol=1e-6)
    assert torch.count_nonzero(got_grads[0][2]) == 0  # a base row gets no gradient through the delta
