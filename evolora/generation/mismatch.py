"""How far apart the rollout's and the update's log-probs are: the importance ratio's error floor.

The learner's clipped ratio exp(log π_update − log π_old) assumes both log-probs come from one
distribution. They come from two code paths: rollouts and the ``old`` log-probs run the routed
inference path (the used factors cached, detached), the update runs the training path (the fp32
master factors, with their graph). Both compute the LoRA delta in fp32 and round it once into the
base's output, so they agree exactly, in fp32 and under a bf16 base; with
:data:`evolora.generation.routed.LORA_COMPUTE_DTYPE` set to bf16 they do not. This module measures
the gap per token (``benchmarks/logprob_mismatch.py`` adds the sampler's KV-cached decode):

    gaps = path_gap(bank, names, samples)      # per completion token, nats
    summarize(gaps)                            # {"mean": ..., "p99": ..., "max": ...}

Source: PopuLoRA (arXiv 2605.16727) §2, step 5 (the clipped GRPO ratio).
"""

from __future__ import annotations

from typing import Sequence

import torch

from evolora.generation.completion import completion_logprobs
from evolora.generation.routed import routed
from evolora.generation.types import RoutedBank


@torch.no_grad()
def path_logprobs(
    bank: RoutedBank, names: list[str], samples: Sequence, *, train: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs (B, T_c) float32 of each completion under adapter ``names[i]`` and its mask (B, T_c) bool.

    ``train=False``: the inference path (what rollouts and ``old`` log-probs use); ``train=True``:
    the training path's arithmetic (fp32 factors, dense masked matmuls), here without a graph.

    Raises:
        KeyError: an unknown adapter name.
    """
    with routed(bank, names, train=train):
        logp, mask = completion_logprobs(bank.model, samples)
    return logp.float(), mask.bool()


def path_gap(bank: RoutedBank, names: list[str], samples: Sequence) -> torch.Tensor:
    """|log π_inference − log π_train| per completion token (1-D, nats), padding dropped.

    Raises:
        KeyError: an unknown adapter name.
    """
    inference, mask = path_logprobs(bank, names, samples, train=False)
    train, _ = path_logprobs(bank, names, samples, train=True)
    return (inference - train).abs()[mask]


def summarize(gaps: torch.Tensor) -> dict[str, float]:
    """Mean, 99th percentile and max of a 1-D tensor of absolute log-prob gaps (nats), and the
    widest importance ratio they allow, exp(max). Raises ValueError on an empty tensor."""
    if gaps.numel() == 0:
        raise ValueError("no completion tokens to compare")
    gaps = gaps.double()
    return {
        "mean": gaps.mean().item(),
        "p99": torch.quantile(gaps, 0.99).item(),
        "max": gaps.max().item(),
        "ratio_max": float(torch.exp(gaps.max()).item()),
    }
