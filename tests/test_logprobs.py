"""Chunked chosen-token log-probs equal the full log-softmax: values, entropy and gradients."""

from __future__ import annotations

import pytest
import torch

from evolora.generation.logprobs import token_logprobs


def _reference(hidden, weight, targets):
    log_p = torch.log_softmax(torch.nn.functional.linear(hidden, weight).float(), dim=-1)
    return log_p.gather(1, targets[:, None]).squeeze(1), -(log_p.exp() * log_p).sum(-1)


@pytest.mark.parametrize("chunk", [1, 5, 64])
def test_chunked_logprobs_entropy_and_grads_equal_full_log_softmax(chunk):
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(
        37,
        8,
        generator=gen,
    ).requires_grad_(True)
    weight = torch.randn(50, 8, generator=gen).requires_grad_(True)
    targets = torch.randint(0, 50, (37,), generator=gen)
    upstream = torch.randn(37, generator=gen)
    logp, entropy = token_logprobs(hidden, weight, targets, chunk=chunk)
    grads = torch.autograd.grad((logp * upstream).sum(), (hidden, weight))
    ref_logp, ref_entropy = _reference(hidden, weight, targets)
    ref_grads = torch.autograd.grad((ref_logp * upstream).sum(), (hidden, weight))
    assert torch.allclose(logp, ref_logp, atol=1e-6, rtol=1e-6)  # fp32: |logp| up to ~17
    assert torch.allclose(entropy, ref_entropy, atol=1e-5, rtol=0)
    assert not entropy.requires_grad and logp.requires_grad
    for got, want in zip(grads, ref_grads):
        assert torch.allclose(got, want, atol=1e-5, rtol=0), (got - want).abs().max()


def test_frozen_head_gets_no_gradient_and_bad_shapes_raise():
    hidden = torch.randn(4, 3, requires_grad=True)
    weight = torch.randn(7, 3)
    logp, _ = token_logprobs(hidden, weight, torch.tensor([0, 6, 2, 2]), chunk=3)
    (grad,) = torch.autograd.grad(logp.sum(), hidden)
    assert grad.shape == hidden.shape and weight.grad is None
    with pytest.raises(ValueError, match="targets"):
        token_logprobs(hidden, weight, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="chunk"):
        token_logprobs(hidden, weight, torch.tensor([0, 1, 2, 3]), chunk=0)
