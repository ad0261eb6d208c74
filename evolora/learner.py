"""Policy-gradient update of one adapter: GRPO / REINFORCE++ with a clipped ratio.

    A_i   = (R_i − mean_g R) / (std_g R + ε)          (GRPO, group g = one prompt)
    A_i   = norm_batch(R_i − mean_g R)                (REINFORCE++ with group baseline)
    ρ_t   = exp(log π(y_t) − log π_old(y_t))
    L     = Σ_t −min(ρ_t A, clip(ρ_t, 1 ± ε) A) + β · k3(π_ref ‖ π)  /  Σ_t 1

Log-probs are computed over completion tokens only (the LM head runs on the completion
slice). Samples whose advantage is exactly 0 carry no policy gradient and are skipped
unless a KL term is on. π_ref is the base model (adapter disabled).

Source: PopuLoRA (arXiv 2605.16727) §2 step 5; GRPO (DeepSeekMath, arXiv 2402.03300);
REINFORCE++ (arXiv 2501.03262); AZR TRR++ (arXiv 2505.03335); k3 estimator (Schulman 2020).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Sample:
    """One completion to learn from.

    Attributes:
        prompt_ids: prompt tokens, length T_p >= 1.
        completion_ids: generated tokens, length T_c >= 1.
        reward: scalar reward (task units, e.g. −1 … 1).
        group: samples sharing a group (same prompt / same role and task type) share a baseline.
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    reward: float
    group: str


def compute_advantages(
    rewards: torch.Tensor, groups: list[str], algorithm: Literal["grpo", "reinforce_pp"] = "grpo", eps: float = 1e-6
) -> torch.Tensor:
    """Per-sample advantages from rewards.

    Shapes: rewards (N,) float; groups N labels; returns (N,) float.
    ``grpo``: centred and divided by the std within each group (0 where the group's
    rewards are all equal). ``reinforce_pp``: centred within each group, then normalised
    over the whole batch (mean 0, std 1 when the std is non-zero).

    Raises:
        ValueError: on length mismatch or an unknown algorithm.
    """
    if rewards.ndim != 1 or rewards.shape[0] != len(groups):
        raise ValueError(f"rewards must be (N,) with N = len(groups) = {len(groups)}, got {tuple(rewards.shape)}")
    if algorithm not in ("grpo", "reinforce_pp"):
        raise ValueError(f"unknown algorithm {algorithm!r}; use 'grpo' or 'reinforce_pp'")
    rewards = rewards.float()
    advantages = torch.zeros_like(rewards)
    for group in dict.fromkeys(groups):
        index = torch.tensor([i for i, g in enumerate(groups) if g == group])
        values = rewards[index]
        centred = values - values.mean()
        if algorithm == "grpo":
            std = values.std(unbiased=False)
            centred = centred / (std + eps) if std > eps else torch.zeros_like(centred)
        advantages[index] = centred
    if algorithm == "reinforce_pp" and advantages.numel() > 1:
        std = advantages.std(unbiased=False)
        if std > eps:
            advantages = (advantages - advantages.mean()) / (std + eps)
    return advantages


def completion_logprobs(model, samples: list[Sample]) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of each sample's completion tokens under ``model``'s active adapter.

    Rows are laid out ``[pad… prompt | completion …pad]`` so every completion starts at
    the same column; the LM head only runs on the last T_c + 1 positions.

    Shapes: returns ``logp`` (B, T_c) float32 and ``mask`` (B, T_c) bool, T_c = longest completion.
    """
    pad_id = 0
    prompt_width = max(len(s.prompt_ids) for s in samples)
    completion_width = max(len(s.completion_ids) for s in samples)
    width = prompt_width + completion_width
    input_ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(samples), width), dtype=torch.long)
    mask = torch.zeros((len(samples), completion_width), dtype=torch.bool)
    for row, sample in enumerate(samples):
        p, c = len(sample.prompt_ids), len(sample.completion_ids)
        input_ids[row, prompt_width - p : prompt_width] = torch.tensor(sample.prompt_ids)
        input_ids[row, prompt_width : prompt_width + c] = torch.tensor(sample.completion_ids)
        attention[row, prompt_width - p : prompt_width + c] = 1
        mask[row, :c] = True
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)  # as in generate() with left padding
    logits = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=position_ids,
        logits_to_keep=completion_width + 1,
        use_cache=False,
    ).logits[:, :-1]  # (B, T_c, V): position t predicts completion token t
    targets = input_ids[:, prompt_width:]
    logp = -F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")  # (B, T_c)
    return logp, mask


@dataclass(frozen=True)
class UpdateResult:
    """What one adapter update did.

    Attributes:
        loss: token-mean surrogate loss of the last epoch (nan when nothing trained).
        grad_norm: gradient L2 norm before clipping of the last epoch.
        samples: samples that carried gradient; tokens: their completion tokens.
        finite: False when a loss or gradient was NaN/Inf (the step was not applied).
    """

    loss: float
    grad_norm: float
    samples: int
    tokens: int
    finite: bool = True


def policy_update(
    bank,
    slot: str,
    optimizer: torch.optim.Optimizer,
    samples: list[Sample],
    *,
    algorithm: Literal["grpo", "reinforce_pp"] = "grpo",
    clip_eps: float = 0.2,
    kl_coef: float = 0.0,
    epochs: int = 1,
    micro_batch: int = 4,
    max_grad_norm: float = 1.0,
) -> UpdateResult:
    """One GRPO / REINFORCE++ update of adapter ``slot`` on its own samples.

    Args:
        bank: the :class:`evolora.population.AdapterBank`.
        slot: the adapter to train; the others stay frozen.
        optimizer: this adapter's optimizer (over ``bank.parameters(slot)``).
        samples: the adapter's samples of this step with rewards and groups.
        algorithm, clip_eps, kl_coef, epochs, micro_batch, max_grad_norm: see
            :class:`evolora.config.LearnerConfig`.

    Returns:
        An :class:`UpdateResult`. Non-finite losses or gradients skip the optimizer step.
    """
    if not samples:
        return UpdateResult(loss=math.nan, grad_norm=0.0, samples=0, tokens=0)
    advantages = compute_advantages(torch.tensor([s.reward for s in samples]), [s.group for s in samples], algorithm)
    keep = [i for i in range(len(samples)) if advantages[i] != 0 or kl_coef > 0]
    if not keep:
        return UpdateResult(loss=math.nan, grad_norm=0.0, samples=0, tokens=0)
    chosen = [samples[i] for i in keep]
    advantages = advantages[keep]
    chunks = [list(range(i, min(i + micro_batch, len(chosen)))) for i in range(0, len(chosen), micro_batch)]
    total_tokens = sum(len(s.completion_ids) for s in chosen)
    model = bank.model
    bank.activate(slot)
    old_logp = _reference_logps(model, chosen, chunks) if epochs > 1 else None
    ref_logp = _reference_logps(model, chosen, chunks, disable_adapter=True) if kl_coef > 0 else None
    params = bank.parameters(slot)
    loss_value, grad_norm, finite = math.nan, 0.0, True
    model.train()
    try:
        for _ in range(epochs):
            optimizer.zero_grad(set_to_none=True)
            loss_sum = 0.0
            for c, rows in enumerate(chunks):
                batch = [chosen[i] for i in rows]
                logp, mask = completion_logprobs(model, batch)
                old = old_logp[c] if old_logp is not None else logp.detach()
                ratio = torch.exp(logp - old)
                adv = advantages[rows].unsqueeze(1)
                per_token = -torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
                if ref_logp is not None:
                    delta = ref_logp[c] - logp
                    per_token = per_token + kl_coef * (torch.exp(delta) - delta - 1)
                loss = (per_token * mask).sum() / total_tokens
                if not torch.isfinite(loss):
                    finite = False
                    break
                loss.backward()
                loss_sum += loss.item()
            if finite:
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
                finite = math.isfinite(grad_norm)
            if not finite:
                optimizer.zero_grad(set_to_none=True)
                break
            optimizer.step()
            loss_value = loss_sum
    finally:
        model.eval()
        for param in params:
            param.requires_grad_(False)
    return UpdateResult(loss=loss_value, grad_norm=grad_norm, samples=len(chosen), tokens=total_tokens, finite=finite)


@torch.no_grad()
def _reference_logps(model, samples, chunks, disable_adapter: bool = False) -> list[torch.Tensor]:
    out = []
    for rows in chunks:
        batch = [samples[i] for i in rows]
        if disable_adapter:
            with model.disable_adapter():
                out.append(completion_logprobs(model, batch)[0])
        else:
            out.append(completion_logprobs(model, batch)[0])
    return out


def make_optimizer(params: list[torch.nn.Parameter], *, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """A fresh AdamW for one adapter (children start with fresh optimizer state)."""
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
