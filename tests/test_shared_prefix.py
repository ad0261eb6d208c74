"""The shared-prefix layout (each (adapter, prompt) prefilled once) equals one padded forward:
log-probs, entropies, gradients and whole policy updates, on the tiny random model."""

from __future__ import annotations

import pytest
import torch
from bank_helpers import random_bank

import evolora.generation.completion as scoring
import evolora.learner as learner
from evolora.generation.completion import completion_logprobs, distinct_prefixes, shared_prefix_logprobs
from evolora.generation.routed import BASE, routed
from evolora.learner import Sample, policy_update_many
from evolora.model import load_base

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# two GRPO-like groups per adapter (prompts of different lengths), a forced-token mask, and a lone row
SAMPLES = (
    [Sample((5, 6, 7, 8, 9), (10 + i, 11, 2)[: 2 + i % 2], float(i % 3), "g") for i in range(4)]
    + [Sample((12, 13), (14, 15 + i, 16, 2), float(i), "h", mask=(True, i == 0, True, True)) for i in range(3)]
    + [Sample((30,), (31, 32), -1.0, "k")]
)
NAMES = ["A0"] * 4 + ["A1"] * 3 + ["A0"]


@pytest.fixture
def bank(tiny):
    model, _ = tiny
    return random_bank(model, ["A0", "A1"], target_modules=MODULES, b_std=0.3)


def _grads(bank, logp, mask):
    params = bank.parameters("A0") + bank.parameters("A1")
    return torch.autograd.grad((logp * mask * torch.linspace(-1, 1, logp.numel()).view_as(logp)).sum(), params)


def _valid(samples, shape):
    valid = torch.zeros(shape, dtype=torch.bool)
    for row, sample in enumerate(samples):
        valid[row, : len(sample.completion_ids)] = True
    return valid


def test_shared_prefix_logprobs_and_grads_equal_one_forward(bank):
    for param in bank.parameters("A0") + bank.parameters("A1"):
        param.requires_grad_(True)
    with routed(bank, NAMES, train=True):
        logp, mask, entropy = completion_logprobs(bank.model, SAMPLES, entropy=True)
        want_grads = _grads(bank, logp, mask)
    got, got_mask, got_entropy = shared_prefix_logprobs(bank, NAMES, SAMPLES, entropy=True, train=True)
    got_grads = _grads(bank, got, got_mask)
    valid = _valid(SAMPLES, logp.shape)
    assert distinct_prefixes(NAMES, SAMPLES) == 3  # (A0, g), (A1, h), (A0, k)
    assert torch.equal(got_mask, mask)
    assert torch.allclose(got[valid], logp[valid], atol=1e-5, rtol=0)
    assert got[~valid].abs().max() == 0
    assert torch.allclose(got_entropy[valid], entropy[valid], atol=1e-4, rtol=0)
    assert any(g.abs().max() > 0 for g in got_grads)
    for g, w in zip(got_grads, want_grads):
        assert torch.allclose(g, w, atol=1e-5, rtol=1e-4), (g - w).abs().max()


def test_shared_prefix_keeps_the_adapter_in_the_prefix(bank):
    """The same prompt under two adapters is two prefixes: each row's prompt KV is its own adapter's."""
    samples = [Sample((5, 6, 7), (8, 9), 0.0, "g"), Sample((5, 6, 7), (8, 9), 0.0, "g")]
    names = ["A0", "A1"]
    with torch.no_grad():
        got = shared_prefix_logprobs(bank, names, samples)[0]
        with routed(bank, names):
            want = completion_logprobs(bank.model, samples)[0]
        with routed(bank, [BASE, BASE]):
            base = completion_logprobs(bank.model, samples)[0]
    assert distinct_prefixes(names, samples) == 2
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got[0], got[1], atol=1e-3)  # the adapters differ, so must their log-probs
    assert not torch.allclose(got, base, atol=1e-3)


def test_policy_update_with_shared_prefixes_equals_padded_update(monkeypatch):
    """A whole GRPO update (two adapters, groups of 4 on one prompt) moves the factors the same way."""
    samples = [Sample((5, 6, 7, 8, 9), (10 + i, 11, 2), float(i % 2), "g") for i in range(4)]
    results = []
    initial = random_bank(load_base("tiny-random")[0], ["A0", "A1"], target_modules=MODULES, b_std=0.3)
    start = {s: initial.get_factors(s) for s in initial.slots}
    for share in (True, False):
        monkeypatch.setattr(scoring, "SHARE_PREFIXES", share)
        bank = random_bank(load_base("tiny-random")[0], ["A0", "A1"], target_modules=MODULES, b_std=0.3)
        # SGD: the step is lr · gradient (Adam's first step, ~lr · sign(g), would amplify fp32 noise)
        jobs = {s: (torch.optim.SGD(bank.parameters(s), lr=1.0), samples) for s in bank.slots}
        update = policy_update_many(bank, jobs, micro_batch=8, kl_coef=0.05)
        results.append((update, {s: bank.get_factors(s) for s in bank.slots}))
    (shared, shared_factors), (plain, plain_factors) = results
    for slot in ("A0", "A1"):
        assert shared[slot].samples == plain[slot].samples == 4
        assert shared[slot].loss == pytest.approx(plain[slot].loss, rel=1e-4, abs=1e-6)
        assert shared[slot].grad_norm == pytest.approx(plain[slot].grad_norm, rel=1e-4)
        assert shared[slot].grad_norm > 0
        for module in shared_factors[slot]:
            for got, want in zip(shared_factors[slot][module], plain_factors[slot][module]):
                assert torch.allclose(got, want, atol=1e-6), (module, (got - want).abs().max())
        assert any(not torch.equal(a, b) for m in start[slot] for a, b in zip(start[slot][m], shared_factors[slot][m]))


def test_distinct_prompts_do_not_take_the_shared_path(bank):
    samples = [Sample((5, 6, 7), (8, 9), 0.0, "g"), Sample((5, 6, 1), (8, 9), 0.0, "g")]
    assert scoring.decoder_tokens(bank, ["A0", "A0"], samples) == (10, 10)
    assert scoring.decoder_tokens(bank, ["A0", "A0"], [samples[0], samples[0]]) == (10, 7)


def test_shared_prefix_refuses_mismatched_names(bank):
    with pytest.raises(ValueError, match="2 adapter names for 1 samples"):
        shared_prefix_logprobs(bank, ["A0", "A1"], SAMPLES[:1])


def test_a_group_micro_batch_runs_shared_and_unchecked(monkeypatch):
    """8 rows of one prompt: 8 × (5 + 3) = 64 padded tokens would be checkpointed at a threshold
    of 50; shared, 5 + 8 · 3 = 29 tokens run once, without checkpointing, with the same gradient."""
    calls = []
    shared = learner.shared_prefix_logprobs
    monkeypatch.setattr(learner, "shared_prefix_logprobs", lambda *a, **k: calls.append(1) or shared(*a, **k))
    monkeypatch.setattr(learner, "CHECKPOINT_MIN_TOKENS", 50)
    monkeypatch.setattr(learner, "PACK_TOKENS", False)  # one micro-batch of 8 either way (packing would split it)
    samples = [Sample((5, 6, 7, 8, 9), (10 + i, 11, 2), float(i % 2), "g") for i in range(8)]
    norms = {}
    for share in (True, False):
        monkeypatch.setattr(scoring, "SHARE_PREFIXES", share)
        bank = random_bank(load_base("tiny-random")[0], ["A0"], target_modules=MODULES, b_std=0.3)
        checkpointing = []
        monkeypatch.setattr(
            learner,
            "_checkpointed_layers",
            lambda model, on, real=learner._checkpointed_layers: checkpointing.append(on) or real(model, on),
        )
        jobs = {"A0": (torch.optim.SGD(bank.parameters("A0"), lr=1.0), samples)}
        norms[share] = (policy_update_many(bank, jobs, micro_batch=8)["A0"].grad_norm, True in checkpointing)
    assert len(calls) == 1
    assert norms[True][1] is False and norms[False][1] is True  # checkpointing switched on only when padded
    assert norms[True][0] == pytest.approx(norms[False][0], rel=1e-4)


def _rows(samples, names):
    return [(name, sample, 1.0) for name, sample in zip(names, samples)]


def test_micro_batches_close_before_the_checkpoint_threshold(bank, monkeypatch):
    """Packed: every row once, one (adapter, prompt)'s rows together, no micro-batch over the
    row cap, and none pushed to the checkpointed size by a row that would fit in a new one."""
    monkeypatch.setattr(learner, "CHECKPOINT_MIN_TOKENS", 20)
    long = Sample(tuple(range(40, 52)), (1, 2, 3, 4, 5, 6, 7, 8, 9), 0.0, "long")  # 21 tokens alone
    samples = [*SAMPLES, long, long]
    names = [*NAMES, "A1", "A1"]
    rows = _rows(samples, names)
    chunks = learner.micro_batches(bank, rows, 4)
    assert sorted(id(r) for c in chunks for r in c) == sorted(id(r) for r in rows)
    costs = [min(scoring.decoder_tokens(bank, *learner._names_samples(c))) for c in chunks]
    assert all(len(c) <= 4 for c in chunks)
    for chunk, cost in zip(chunks, costs):
        if cost >= 20:  # checkpointed: only when its first row alone is already that size
            assert min(scoring.decoder_tokens(bank, *learner._names_samples(chunk[:1]))) >= 20
    group = [sum((slot, s.prompt_ids) == ("A0", (5, 6, 7, 8, 9)) for slot, s, _ in c) for c in chunks]
    assert sorted(group)[-1] == 4  # the GRPO group that fits stays in one micro-batch (one shared prefill)
    assert [len(c) for c, cost in zip(chunks, costs) if cost >= 20] == [1, 1]  # the two long rows, each alone
    monkeypatch.setattr(learner, "CHECKPOINT_LAYERS", False)  # nothing is ever checkpointed: only the row cap splits
    assert [len(c) for c in learner.micro_batches(bank, rows, 4)] == [4, 4, 2]
    monkeypatch.setattr(learner, "PACK_TOKENS", False)
    assert learner.micro_batches(bank, rows, 4) == [rows[0:4], rows[4:8], rows[8:10]]


def test_packed_update_equals_the_row_order_update(monkeypatch):
    """Packing only reorders and regroups rows: the factors move the same way (SGD, fp32 order only)."""
    monkeypatch.setattr(learner, "CHECKPOINT_MIN_TOKENS", 24)
    samples = SAMPLES + [Sample(tuple(range(40, 60)), (1, 2, 3), 1.0, "k")]
    factors, chunks = {}, {}
    for pack in (True, False):
        monkeypatch.setattr(learner, "PACK_TOKENS", pack)
        bank = random_bank(load_base("tiny-random")[0], ["A0", "A1"], target_modules=MODULES, b_std=0.3)
        jobs = {
            s: (torch.optim.SGD(bank.parameters(s), lr=1.0), [x for x, n in zip(samples, [*NAMES, "A0"]) if n == s])
            for s in bank.slots
        }
        rows = learner._plan(jobs, "grpo", 0.0, "cpu")[0]
        chunks[pack] = len(learner.micro_batches(bank, rows, 4))
        update = policy_update_many(bank, jobs, micro_batch=4)
        assert all(update[s].grad_norm > 0 for s in bank.slots)
        factors[pack] = {s: bank.get_factors(s) for s in bank.slots}
    assert chunks[True] != chunks[False]  # the plans differ, the updates must not
    for slot in ("A0", "A1"):
        for module in factors[True][slot]:
            for got, want in zip(factors[True][slot][module], factors[False][slot][module]):
                assert torch.allclose(got, want, atol=1e-6), (module, (got - want).abs().max())
