"""Routed multi-adapter LoRA gives the same generations, log-probs and updates as PEFT one adapter at a time."""

from __future__ import annotations

import pytest
import torch

from evolora.model import load_base
from evolora.learner import Sample, completion_logprobs, make_optimizer, policy_update_many
from evolora.population import AdapterBank
from evolora.rollout import BASE, chat_prompt, generate
from evolora.routed import routed

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture
def bank(tiny):
    model, _ = tiny
    bank = AdapterBank(model, ["A0", "A1", "A2"], rank=4, alpha=8, target_modules=MODULES)
    generator = torch.Generator().manual_seed(0)
    for slot in bank.slots:
        bank.init_factors(slot, generator, b_std=0.3)
    return bank


def _peft_logprobs(bank, slot, samples):
    bank.model.set_adapter(slot)
    with torch.no_grad():
        return completion_logprobs(bank.model, samples)[0]


SAMPLES = [Sample((5, 6, 7, 8), (10, 11, 2), 1.0, "g"), Sample((12, 13), (14, 15, 16, 2), 0.0, "g"),
           Sample((20, 21, 22), (23, 2), 0.5, "h"), Sample((30,), (31, 32), -1.0, "h")]


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
    ours = generate(bank.model, tokenizer, prompts, names, max_new_tokens=10, greedy=True, bank=bank)
    peft = generate(bank.model, tokenizer, prompts, names, max_new_tokens=10, greedy=True)
    assert [c.completion_ids for c in ours] == [c.completion_ids for c in peft]


def test_batched_update_equals_sequential_updates():
    def fresh():
        model, _ = load_base("tiny-random")  # the same seed: identical weights each time
        bank = AdapterBank(model, ["A0", "A1"], rank=4, alpha=8, target_modules=("q_proj", "v_proj"))
        generator = torch.Generator().manual_seed(0)
        for slot in bank.slots:
            bank.init_factors(slot, generator, b_std=0.3)
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
