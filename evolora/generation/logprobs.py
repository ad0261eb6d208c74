"""Log-probabilities of chosen tokens without materialising full-vocabulary log-softmaxes.

The learner needs log π(y_t) of every trained completion token, and the policy's entropy.
Through ``logits → log_softmax`` autograd keeps (N, V) fp32 tensors alive until backward
(SmolLM2: V = 49152, so 4 rows × 180 tokens hold 141 MB per copy, several copies). Here the
LM head runs on chunks of ``chunk`` positions inside a custom autograd function that keeps
only the hidden states and one log-normaliser per position; backward recomputes each chunk's
logits (one more LM-head matmul) for the gradient

    ∂ log p(y) / ∂ logits = onehot(y) − softmax(logits),  ∂ / ∂ hidden = (that) · W.

Entropy H = lse − Σ_v p_v · logit_v is computed in the same pass (no gradient).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK = 128
"""Positions per LM-head chunk: (CHUNK, V) fp32 = 25 MB for SmolLM2."""


class _TokenLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk, linear):
        n = hidden.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
        for i in range(0, n, chunk):
            logits = linear(hidden[i : i + chunk], weight).float()  # (c, V)
            lse[i : i + chunk] = norm = logits.logsumexp(dim=-1)
            logp[i : i + chunk] = logits.gather(1, targets[i : i + chunk, None]).squeeze(1) - norm
            probs = (logits - norm[:, None]).exp_()
            entropy[i : i + chunk] = norm - (probs * logits).sum(dim=-1)
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.chunk, ctx.linear = chunk, linear
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        hidden, weight, targets, lse = ctx.saved_tensors
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if want_weight else None
        for i in range(0, hidden.shape[0], ctx.chunk):
            h, g = hidden[i : i + ctx.chunk], grad_logp[i : i + ctx.chunk]
            logits = ctx.linear(h, weight).float()
            grad = (logits - lse[i : i + ctx.chunk, None]).exp_().mul_(-g[:, None])  # −g · softmax
            grad.scatter_add_(1, targets[i : i + ctx.chunk, None], g[:, None])  # + g · onehot(y)
            if want_hidden:
                grad_hidden[i : i + ctx.chunk] = (grad.to(weight.dtype) @ weight).to(hidden.dtype)
            if want_weight:
                grad_weight += grad.t() @ h.float()
        return grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype), None, None, None


def token_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *, chunk: int = CHUNK, linear=F.linear
) -> tuple[torch.Tensor, torch.Tensor]:
    """log softmax(hidden · Wᵀ)[target] and the entropy of each position, chunk by chunk.

    Shapes: hidden (N, d) (any float dtype, may require grad), weight (V, d) the LM head (tied
    embedding or not), targets (N,) long in [0, V); returns logp (N,) float32 (differentiable
    in hidden and weight) and entropy (N,) float32 in nats (no gradient). Equal to
    ``log_softmax(F.linear(hidden, weight).float())`` gathered at the targets (fp32
    reassociation only). Peak extra memory: a few (chunk, V) fp32 tensors. ``linear``: the
    ``(x, weight) -> x · weightᵀ`` of the logits, forward and backward: the head's own
    (:func:`evolora.model.prepack.head_linear`) so that rollouts and updates share one GEMM.

    Raises:
        ValueError: shapes that do not fit, or ``chunk < 1``.
    """
    if hidden.ndim != 2 or targets.shape != hidden.shape[:1] or weight.shape[-1] != hidden.shape[-1]:
        raise ValueError(
            f"hidden (N, d), weight (V, d), targets (N,) expected; got {tuple(hidden.shape)}, "
            f"{tuple(weight.shape)}, {tuple(targets.shape)}"
        )
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    return _TokenLogProbs.apply(hidden, weight, targets, chunk, linear)
