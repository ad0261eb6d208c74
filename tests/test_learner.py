"""The RL learner: advantages on fixed inputs, padding-invariant log-probs, and an update that moves."""

from __future__ import annotations

import math

import pytest
import torch
from bank_helpers import random_bank

from evolora.advantages import compute_advantages
from evolora.bank.local import AdapterBank
from evolora.learner import Sample, completion_logprobs, make_optimizer, policy_update


def test_grpo_advantages_centre_and_scale_per_group():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, -1.0, 0.5])
    groups = ["a", "a", "a", "b", "b", "c"]
    adv = compute_advantages(rewards, groups, "grpo")
    # group a: mean 2/3, std sqrt(2/9); group b: mean 0, std 1; group c: constant -> 0
    std_a = math.sqrt(2 / 9)
    expected = [(1 - 2 / 3) / std_a, (0 - 2 / 3) / std_a, (1 - 2 / 3) / std_a, 1.0, -1.0, 0.0]
    assert torch.allclose(adv, torch.tensor(expected), atol=1e-4)


def test_reinforce_pp_advantages_are_batch_normalised():
    rewards = torch.tensor([1.0, 0.0, 3.0, 1.0])
    adv = compute_advantages(rewards, ["a", "a", "b", "b"], "reinforce_pp")
    centred = torch.tensor([0.5, -0.5, 1.0, -1.0])
    expected = (centred - centred.mean()) / centred.std(unbiased=False)
    assert torch.allclose(adv, expected, atol=1e-5)
    assert abs(adv.mean().item()) < 1e-6


def test_dr_grpo_advantages_are_only_centred_per_group():
    # one success in a group of 8 (reward 1 vs -0.5): GRPO's std makes it 2.65, Dr. GRPO keeps 1.3125
    rewards = torch.tensor([1.0] + [-0.5] * 7 + [1.0, 1.0, 1.0, 1.0])
    groups = ["a"] * 8 + ["b"] * 4
    dr = compute_advantages(rewards, groups, "dr_grpo")
    assert dr[0].item() == pytest.approx(1.5 * 7 / 8) and dr[1].item() == pytest.approx(-1.5 / 8)
    assert torch.equal(dr[8:], torch.zeros(4))  # a solved-by-all group carries no gradient
    grpo = compute_advantages(rewards, groups, "grpo")
    assert grpo[0].item() == pytest.approx(dr[0].item() / rewards[:8].std(unbiased=False).item(), rel=1e-5)
    assert grpo[0].item() > 2 * dr[0].item()


def test_bad_advantage_input_raises():
    with pytest.raises(ValueError, match="len\\(groups\\)"):
        compute_advantages(torch.zeros(3), ["a"], "grpo")
    with pytest.raises(ValueError, match="unknown algorithm"):
        compute_advantages(torch.zeros(1), ["a"], "ppo")


@pytest.fixture
def bank(tiny):
    model, _ = tiny
    bank = random_bank(model, ["A0", "A1"], target_modules=("q_proj", "v_proj"), b_std=0.1)
    return bank


def _samples():
    return [
        Sample(prompt_ids=(5, 6, 7, 8, 9), completion_ids=(10, 11, 2), reward=1.0, group="g"),
        Sample(prompt_ids=(12, 13), completion_ids=(14, 15, 16, 17, 2), reward=0.0, group="g"),
        Sample(prompt_ids=(20,), completion_ids=(21,), reward=0.5, group="h"),
    ]


def test_batched_logprobs_equal_one_at_a_time(bank):
    bank.activate("A0")
    samples = _samples()
    with torch.no_grad():
        batched, mask = completion_logprobs(bank.model, samples)
        for row, sample in enumerate(samples):
            alone, _ = completion_logprobs(bank.model, [sample])
            n = len(sample.completion_ids)
            assert mask[row].sum().item() == n
            assert torch.allclose(batched[row, :n], alone[0, :n], atol=1e-5)


def test_chunked_completion_logprobs_equal_full_logits_path(bank, monkeypatch):
    """The chunked LM-head path equals full logits + log_softmax: values, entropy, LoRA grads."""
    import evolora.generation.completion as completion

    samples = _samples() + [Sample((5, 6), (7, 8, 9), 1.0, "g", mask=(True, False, True))]
    bank.activate("A0")
    params = bank.parameters("A0")

    def run():
        logp, mask, entropy = completion_logprobs(bank.model, samples, entropy=True)
        grads = torch.autograd.grad((logp * mask).sum(), params)
        return logp, mask, entropy, grads

    chunked = run()
    monkeypatch.setattr(completion, "body_and_head", lambda model: (None, None))
    full = run()
    valid = torch.zeros_like(full[1])
    for row, sample in enumerate(samples):
        valid[row, : len(sample.completion_ids)] = True
    assert torch.equal(chunked[1], full[1])
    assert torch.allclose(chunked[0][valid], full[0][valid], atol=1e-6, rtol=0)
    assert torch.allclose(chunked[2][valid], full[2][valid], atol=1e-5, rtol=0)
    assert chunked[0][~valid].abs().max() == 0
    for got, want in zip(chunked[3], full[3]):
        assert torch.allclose(got, want, atol=1e-6, rtol=1e-5), (got - want).abs().max()


def test_logprobs_differ_between_adapters(bank):
    samples = _samples()
    with torch.no_grad():
        bank.activate("A0")
        a0, _ = completion_logprobs(bank.model, samples)
        bank.activate("A1")
        a1, _ = completion_logprobs(bank.model, samples)
    assert not torch.allclose(a0, a1)


def test_update_raises_logprob_of_the_rewarded_sample_and_touches_only_its_adapter(bank):
    samples = _samples()[:2]  # same group: +1 vs 0 -> positive advantage for the first
    other_before = bank.get_factors("A1")
    bank.activate("A0")
    with torch.no_grad():
        before, _ = completion_logprobs(bank.model, samples)
    optimizer = make_optimizer(bank.parameters("A0"), lr=1e-2, weight_decay=0.0)
    result = policy_update(bank, "A0", optimizer, samples, micro_batch=1)
    assert result.finite and result.samples == 2 and result.tokens == 8
    bank.activate("A0")
    with torch.no_grad():
        after, _ = completion_logprobs(bank.model, samples)
    assert after[0, :3].sum() > before[0, :3].sum()
    assert after[1, :5].sum() < before[1, :5].sum()
    other_after = bank.get_factors("A1")
    assert all(torch.equal(other_before[k][0], other_after[k][0]) for k in other_before)


def test_constant_rewards_train_nothing(bank):
    samples = [Sample((5, 6), (7, 2), 1.0, "g"), Sample((5, 6), (8, 2), 1.0, "g")]
    optimizer = make_optimizer(bank.parameters("A0"), lr=1e-2, weight_decay=0.0)
    result = policy_update(bank, "A0", optimizer, samples)
    assert result.samples == 0 and math.isnan(result.loss)


@pytest.mark.parametrize("algorithm", ["grpo", "reinforce_pp"])
def test_equal_rewards_inexact_in_fp32_give_exactly_zero_advantages(algorithm):
    # the fp32 mean of eight 0.1 is off by 7e-9: REINFORCE++ used to train on that noise
    rewards = torch.tensor([0.1] * 8 + [1.0, 0.0])
    adv = compute_advantages(rewards, ["g"] * 8 + ["h"] * 2, algorithm)
    assert adv[:8].tolist() == [0.0] * 8
    assert adv[8].item() > 0.9 and adv[9].item() < -0.9
    assert compute_advantages(torch.tensor([0.1] * 8), ["g"] * 8, algorithm).tolist() == [0.0] * 8


def test_reinforce_pp_on_equal_rewards_leaves_the_adapter_unchanged(bank):
    samples = [Sample((5, 6), (7 + i, 2), 0.1, "g") for i in range(8)]
    before = bank.get_factors("A0")
    optimizer = make_optimizer(bank.parameters("A0"), lr=1e-2, weight_decay=0.0)
    result = policy_update(bank, "A0", optimizer, samples, algorithm="reinforce_pp")
    assert result.samples == 0 and math.isnan(result.loss)
    after = bank.get_factors("A0")
    assert all(torch.equal(before[k][0], after[k][0]) and torch.equal(before[k][1], after[k][1]) for k in before)


def test_nonfinite_advantage_input_raises():
    with pytest.raises(ValueError, match="finite; NaN/Inf at indices \\[1\\]"):
        compute_advantages(torch.tensor([1.0, math.nan, 0.0]), ["g"] * 3, "grpo")


@pytest.mark.parametrize("algorithm", ["grpo", "reinforce_pp"])
def test_nonfinite_rewards_are_dropped_and_counted_not_zeroed(algorithm):
    """A NaN used to zero its whole GRPO group (the finite samples too) without a word."""
    from evolora.model import load_base

    finite = _samples()[:2]  # group g: rewards 1 and 0
    bad = [Sample((5, 6), (7, 2), math.nan, "g"), Sample((5, 6), (8, 2), math.inf, "h")]
    outcomes = []
    for samples in (finite, [bad[0], finite[0], bad[1], finite[1]]):
        bank = AdapterBank(load_base("tiny-random")[0], ["A0"], rank=4, alpha=8, target_modules=("q_proj", "v_proj"))
        bank.init_factors("A0", torch.Generator().manual_seed(0), b_std=0.1)
        optimizer = make_optimizer(bank.parameters("A0"), lr=1e-2, weight_decay=0.0)
        outcomes.append((policy_update(bank, "A0", optimizer, samples, algorithm=algorithm), bank.get_factors("A0")))
    (clean, clean_factors), (mixed, mixed_factors) = outcomes
    assert (clean.nonfinite_rewards, mixed.nonfinite_rewards) == (0, 2)
    assert mixed.samples == clean.samples == 2 and mixed.finite and math.isfinite(mixed.loss)
    # the finite samples train exactly as if the bad ones had never been there
    assert all(torch.equal(clean_factors[k][i], mixed_factors[k][i]) for k in clean_factors for i in (0, 1))


def test_checkpointed_layers_give_the_same_update(monkeypatch):
    """Recomputing the decoder layers in backward (routed hooks included) changes no gradient."""
    import evolora.learner as learner
    from evolora.model import load_base

    samples = _samples()
    factors = []
    for on in (True, False):
        monkeypatch.setattr(learner, "CHECKPOINT_LAYERS", on)
        bank = AdapterBank(
            load_base("tiny-random")[0], ["A0", "A1"], rank=4, alpha=8, target_modules=("q_proj", "v_proj", "down_proj")
        )
        for slot in bank.slots:
            bank.init_factors(slot, torch.Generator().manual_seed(0), b_std=0.1)
        jobs = {s: (make_optimizer(bank.parameters(s), lr=1e-2, weight_decay=0.0), samples) for s in bank.slots}
        results = learner.policy_update_many(bank, jobs, micro_batch=2)
        assert not bank.model.get_base_model().model.layers[0].gradient_checkpointing
        factors.append(({s: bank.get_factors(s) for s in bank.slots}, results))
    (ours, ours_results), (plain, plain_results) = factors
    for slot in ours:
        assert ours_results[slot].grad_norm == pytest.approx(plain_results[slot].grad_norm, rel=1e-5)
        for module in ours[slot]:
            for got, want in zip(ours[slot][module], plain[slot][module]):
                assert torch.allclose(got, want, atol=1e-6), module


@pytest.mark.parametrize("algorithm", ["grpo", "reinforce_pp"])
def test_sample_weights_scale_the_normalised_advantage_and_zero_drops_the_sample(algorithm):
    from evolora.learner import _plan

    def sample(reward, group, weight=1.0):
        return Sample(prompt_ids=(1, 2), completion_ids=(3,), reward=reward, group=group, weight=weight)

    plain = [sample(1.0, "a"), sample(-1.0, "a"), sample(0.5, "b"), sample(0.0, "b")]
    weighted = [sample(1.0, "a", 2.5), sample(-1.0, "a", 2.5), sample(0.5, "b", 0.0), sample(0.0, "b", 0.0)]
    rows, _, _ = _plan({"x": (None, plain)}, algorithm, 0.0, "cpu")
    base = [a for _, _, a in rows]
    rows, tokens, _ = _plan({"x": (None, weighted)}, algorithm, 0.0, "cpu")
    assert [a for _, _, a in rows] == pytest.approx([2.5 * base[0], 2.5 * base[1]])  # after the normalisation
    assert tokens == {"x": 2} and base[0] > 0 > base[1]  # weight 0: no gradient, no tokens


def test_centred_groups_skip_the_std_under_grpo_only():
    rewards, groups = torch.tensor([1.0, -1.0, -1.0, -1.0, 2.0, 0.0]), ["a"] * 4 + ["b"] * 2
    plain = compute_advantages(rewards, groups)
    centred = compute_advantages(rewards, groups, centred=frozenset({"a"}))
    assert centred[:4].tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5]) and torch.equal(centred[4:], plain[4:])
    assert plain[0] == pytest.approx(1.5 / math.sqrt(0.75), rel=1e-5)
    pp = compute_advantages(rewards, groups, "reinforce_pp")
    assert torch.equal(pp, compute_advantages(rewards, groups, "reinforce_pp", centred=frozenset({"a"})))
