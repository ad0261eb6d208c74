"""Advantage estimators: per-sample advantages from a step's rewards, grouped by prompt.

    A_i = (R_i − mean_g R) / (std_g R + ε)          grpo          (group g = one prompt)
    A_i = R_i − mean_g R                            dr_grpo       (Dr. GRPO, arXiv 2503.20783)
    A_i = norm_batch(R_i − mean_g R)                reinforce_pp  (REINFORCE++ with group baseline)

Pure tensor math on rewards; the clipped policy update that consumes the advantages is
:mod:`evolora.learner`. Source: PopuLoRA (arXiv 2605.16727) §2 step 5; GRPO (DeepSeekMath,
arXiv 2402.03300); REINFORCE++ (arXiv 2501.03262).
"""

from __future__ import annotations

from typing import get_args

import torch

from evolora.config.types import Algorithm


def compute_advantages(
    rewards: torch.Tensor,
    groups: list[str],
    algorithm: Algorithm = "grpo",
    eps: float = 1e-6,
    centred: frozenset[str] = frozenset(),
) -> torch.Tensor:
    """Per-sample advantages from rewards.

    Shapes: rewards (N,) float, finite (reward units); groups N labels; returns (N,) float32.
    ``grpo``: centred and divided by the std within each group. ``dr_grpo``: only centred within
    each group, so a group's advantages keep the size of its reward differences (Dr. GRPO,
    arXiv 2503.20783 §3.1; the loss stays the token mean over the update). ``reinforce_pp``: centred
    within each group, then divided by the std over the whole batch (std 1 when non-zero; the
    batch mean of group-centred values is already 0, so it is not subtracted again). All three give
    exactly 0 to a group whose rewards are equal within ``eps`` (std ≤ eps), see :func:`group_centred`.
    Groups named in ``centred`` are only centred under ``grpo`` (Dr. GRPO, arXiv 2503.20783).

    Source: PopuLoRA (arXiv 2605.16727) §2 step 5; GRPO (arXiv 2402.03300); REINFORCE++ (arXiv 2501.03262).

    Raises:
        ValueError: on length mismatch, an unknown algorithm or a NaN/Inf reward
            (:func:`policy_update_many` drops those samples first and reports them).
    """
    if rewards.ndim != 1 or rewards.shape[0] != len(groups):
        raise ValueError(f"rewards must be (N,) with N = len(groups) = {len(groups)}, got {tuple(rewards.shape)}")
    if algorithm not in get_args(Algorithm):
        raise ValueError(f"unknown algorithm {algorithm!r}; use 'grpo', 'dr_grpo' or 'reinforce_pp'")
    rewards = rewards.float()
    if not torch.isfinite(rewards).all():
        bad = torch.nonzero(~torch.isfinite(rewards)).flatten().tolist()[:5]
        raise ValueError(f"rewards must be finite; NaN/Inf at indices {bad}")
    advantages = torch.zeros_like(rewards)
    for group in dict.fromkeys(groups):
        index = torch.tensor([i for i, g in enumerate(groups) if g == group], device=rewards.device)
        centred_values, std = group_centred(rewards[index], eps)
        scaled = algorithm == "grpo" and std > eps and group not in centred
        advantages[index] = centred_values / (std + eps) if scaled else centred_values
    if algorithm == "reinforce_pp" and advantages.numel() > 1:
        std = advantages.std(unbiased=False)
        if std > eps:
            advantages = advantages / (std + eps)  # zero stays exactly zero
    return advantages


def group_centred(values: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """One group's rewards minus their mean, and their (population) std.

    Shapes: values (G,) float; returns ((G,), scalar). When the std is ≤ ``eps`` the rewards are
    equal within tolerance and the centred values are exactly 0: the fp32 mean of equal inexact
    rewards (e.g. eight 0.1) differs from them by ~1e-8, which AdamW would otherwise amplify
    into a full-size step on noise. GRPO's rule (arXiv 2402.03300), shared by REINFORCE++.
    """
    std = (
        values.std(unbiased=False) if values.numel() > 1 else torch.zeros((), dtype=values.dtype, device=values.device)
    )
    if not std > eps:
        return torch.zeros_like(values), std
    return values - values.mean(), std
