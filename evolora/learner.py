"""Policy-gradient update of one adapter: GRPO / REINFORCE++ with a clipped ratio.

    A_i   = (R_i − mean_g R) / (std_g R + ε)          (GRPO, group g = one prompt)
    A_i   = R_i − mean_g R                            (Dr. GRPO, arXiv 2503.20783)
    A_i   = norm_batch(R_i − mean_g R)                (REINFORCE++ with group baseline)
    A_i  ← w_i · A_i                                  (per-sample weight, 1 but for critics)
    ρ_t   = exp(log π(y_t) − log π_old(y_t))
    L     = Σ_t −min(ρ_t A, clip(ρ_t, 1 ± ε) A) + β · k3(π_ref ‖ π)  /  Σ_t 1

Log-probs are computed over completion tokens only (the LM head runs on the completion
slice). Samples whose advantage is exactly 0 carry no policy gradient and are skipped unless a
KL term is on; a group whose rewards are equal within ε gets exactly 0 under every estimator.
A sample with a NaN/Inf reward is dropped and counted (``UpdateResult.nonfinite_rewards``),
never zeroed. π_ref is the base model (adapter disabled).

Source: PopuLoRA (arXiv 2605.16727) §2 step 5; GRPO (DeepSeekMath, arXiv 2402.03300);
REINFORCE++ (arXiv 2501.03262); AZR TRR++ (arXiv 2505.03335); k3 estimator (Schulman 2020).
"""

from __future__ import annotations

import itertools
import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Iterator, Protocol

import torch
from torch.utils.checkpoint import checkpoint

from evolora.advantages import compute_advantages
from evolora.config.types import Algorithm
from evolora.generation.completion import completion_logprobs, decoder_tokens, routed_logprobs, shared_prefix_logprobs
from evolora.generation.routed import BASE, routed
from evolora.generation.types import RoutedBank
from evolora.model.device import model_device

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM


class TrainableBank(RoutedBank, Protocol):
    """What an update reads of a bank: its adapters in this process on one model
    (:class:`evolora.generation.types.RoutedBank`: ``model``, ``slots``, ``rank``, ``alpha``,
    ``layers``) and each slot's trainable factors. :class:`evolora.bank.local.AdapterBank` is one
    (every :class:`evolora.bank.LocalBank` is)."""

    def parameters(self, slot: str) -> list:
        """The slot's trainable fp32 factor tensors (A and B of every module)."""


@dataclass(frozen=True)
class Sample:
    """One completion to learn from.

    Attributes:
        prompt_ids: prompt tokens, length T_p >= 1.
        completion_ids: generated tokens, length T_c >= 1.
        reward: scalar reward (task units, e.g. −1 … 1).
        group: samples sharing a group (same prompt / same role and task type) share a baseline.
        mask: per completion token, True when it was sampled and is trained on, False for
            forced text of a multi-segment rollout (:mod:`evolora.generation.segments`); None: all sampled.
        weight: multiplies the sample's advantage after the group normalisation (>= 0; 1 for
            teachers and students): a critic's balanced class weight, which GRPO's per-group std
            would cancel if it were part of the reward (:func:`evolora.critic.verdict_sample`).
        centred: True when the sample's group is only centred, not divided by its std, under GRPO
            (Dr. GRPO, arXiv 2503.20783), so reward differences keep their size (a critic's
            entropy bonus); every sample of a group must agree. False for teachers and students.
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    reward: float
    group: str
    mask: tuple[bool, ...] | None = None
    weight: float = 1.0
    centred: bool = False

    @property
    def trained_tokens(self) -> int:
        """Completion tokens the loss counts (the sampled ones)."""
        return len(self.completion_ids) if self.mask is None else sum(self.mask)


@dataclass(frozen=True)
class UpdateResult:
    """What one adapter update did.

    Attributes:
        loss: token-mean surrogate loss of the last epoch (nan when nothing trained).
        grad_norm: gradient L2 norm before clipping of the last epoch.
        samples: samples that carried gradient; tokens: their completion tokens.
        finite: False when a loss or gradient was NaN/Inf (the step was not applied).
        entropy: mean token entropy (nats) of the policy on its trained completions.
        nonfinite_rewards: samples dropped because their reward was NaN/Inf (a fault of the
            reward code: they are neither trained on nor counted in their group's baseline).
    """

    loss: float
    grad_norm: float
    samples: int
    tokens: int
    finite: bool = True
    entropy: float = math.nan
    nonfinite_rewards: int = 0


def policy_update(
    bank: TrainableBank,
    slot: str,
    optimizer: torch.optim.Optimizer,
    samples: list[Sample],
    **settings,
) -> UpdateResult:
    """One GRPO / REINFORCE++ update of adapter ``slot`` on its own samples.

    The one-adapter form of :func:`policy_update_many` (same settings, same math).
    """
    return policy_update_many(bank, {slot: (optimizer, samples)}, **settings)[slot]


def policy_update_many(
    bank: TrainableBank,
    jobs: dict[str, tuple[torch.optim.Optimizer, list[Sample]]],
    *,
    algorithm: Algorithm = "grpo",
    clip_eps: float = 0.2,
    kl_coef: float = 0.0,
    epochs: int = 1,
    micro_batch: int = 4,
    max_grad_norm: float = 1.0,
) -> dict[str, UpdateResult]:
    """Update many adapters at once: rows of different adapters share micro-batches.

    Each adapter's loss is its own token-mean surrogate, so the summed loss gives every
    adapter exactly the gradient of a separate update; rows are routed through their own
    adapter by :func:`evolora.generation.routed.routed` (two batched matmuls per layer), so P adapters
    cost one forward/backward instead of P. Source: PopuLoRA (arXiv 2605.16727) §2 step 5.

    Args:
        bank: the :class:`evolora.bank.local.AdapterBank`.
        jobs: {slot: (its optimizer over ``bank.parameters(slot)``, its samples)}.
        algorithm, clip_eps, kl_coef, epochs, micro_batch, max_grad_norm: see
            :class:`evolora.config.LearnerConfig`; ``micro_batch`` counts rows of any adapter.

    Returns:
        {slot: :class:`UpdateResult`}. An adapter whose loss or gradient is non-finite is
        not stepped (``finite=False``); the others are. Samples with a NaN/Inf reward are
        dropped before the advantages are computed and counted in ``nonfinite_rewards``.
    """
    rows, tokens, dropped = _plan(jobs, algorithm, kl_coef, model_device(bank.model))
    results = {
        slot: UpdateResult(loss=math.nan, grad_norm=0.0, samples=0, tokens=0, nonfinite_rewards=dropped[slot])
        for slot in jobs
    }
    if not rows:
        return results
    chunks = micro_batches(bank, rows, micro_batch)
    old_logp = [_no_grad_logps(bank, chunk) for chunk in chunks] if epochs > 1 else None
    ref_logp = [_no_grad_logps(bank, chunk, base=True) for chunk in chunks] if kl_coef > 0 else None
    params = {slot: bank.parameters(slot) for slot in tokens}
    _set_trainable(params, True)
    finite, losses, norms = dict.fromkeys(tokens, True), {}, {}
    entropy_sum = dict.fromkeys(tokens, 0.0)
    bank.model.train()
    try:
        for _ in range(epochs):
            for slot in tokens:
                jobs[slot][0].zero_grad(set_to_none=True)
            epoch_loss = dict.fromkeys(tokens, 0.0)
            for c, chunk in enumerate(chunks):  # accumulate every adapter's gradient
                names, per_row, entropy = _chunk_loss(
                    bank,
                    chunk,
                    tokens,
                    old_logp[c] if old_logp else None,
                    ref_logp[c] if ref_logp else None,
                    clip_eps,
                    kl_coef,
                )
                for slot, value, row_entropy in zip(names, per_row.tolist(), entropy):
                    epoch_loss[slot] += value
                    finite[slot] &= math.isfinite(value)
                    entropy_sum[slot] += row_entropy / epochs
            _clip_and_step(params, jobs, max_grad_norm, epoch_loss, finite, norms, losses)
    finally:
        bank.model.eval()
        _set_trainable(params, False)
    for slot in tokens:
        results[slot] = UpdateResult(
            loss=losses.get(slot, math.nan),
            grad_norm=norms.get(slot, 0.0),
            samples=sum(1 for s, _, _ in rows if s == slot),
            tokens=tokens[slot],
            finite=finite[slot],
            entropy=entropy_sum[slot] / tokens[slot],
            nonfinite_rewards=dropped[slot],
        )
    return results


def _plan(jobs, algorithm, kl_coef, device) -> tuple[list[tuple[str, Sample, float]], dict[str, int], dict[str, int]]:
    """The rows that carry gradient ((slot, sample, advantage)), trained tokens per slot, and the
    samples per slot dropped for a NaN/Inf reward (never part of a group baseline). The rewards
    are a tensor on ``device`` (the model's)."""
    rows: list[tuple[str, Sample, float]] = []
    tokens: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for slot, (_, samples) in jobs.items():
        kept = [s for s in samples if math.isfinite(s.reward)]
        dropped[slot] = len(samples) - len(kept)
        if not kept:
            continue
        rewards = torch.tensor([s.reward for s in kept], device=device)
        advantages = compute_advantages(
            rewards, [s.group for s in kept], algorithm, centred=frozenset(s.group for s in kept if s.centred)
        )
        for sample, advantage in zip(kept, advantages.tolist()):
            advantage = advantage if sample.weight == 1.0 else advantage * sample.weight
            if (advantage != 0 or kl_coef > 0) and sample.trained_tokens > 0:
                rows.append((slot, sample, advantage))
                tokens[slot] = tokens.get(slot, 0) + sample.trained_tokens
    return rows, tokens, dropped


def micro_batches(bank: TrainableBank, rows: list[tuple[str, Sample, float]], micro_batch: int) -> list[list]:
    """The update's rows ((slot, sample, advantage)) in micro-batches of at most ``micro_batch`` rows.

    With :data:`PACK_TOKENS`: ordered by prompt (length, then ids: less padding) and packed one
    (adapter, prompt) group at a time, a GRPO group whole when it fits (:data:`evolora.generation.completion.SHARE_PREFIXES`);
    a micro-batch takes the next group only if it stays unchecked (:func:`_layout`: below
    :data:`CHECKPOINT_MIN_TOKENS` decoder tokens; checkpointing costs one more forward); a group
    that does not fit is split row by row, and a row checkpointed by itself runs alone. Without: runs of
    ``micro_batch`` rows in plan order. Same gradients (fp32 order only). PopuLoRA (arXiv 2605.16727) §2 step 5.
    """
    if not PACK_TOKENS:
        return [rows[i : i + micro_batch] for i in range(0, len(rows), micro_batch)]
    ordered = sorted(rows, key=lambda r: (len(r[1].prompt_ids), r[1].prompt_ids, r[0], len(r[1].completion_ids)))
    chunks: list[list] = []
    for _, group in itertools.groupby(ordered, key=lambda r: (r[0], r[1].prompt_ids)):
        group = list(group)
        if chunks and _fits(bank, chunks[-1] + group, micro_batch):
            chunks[-1] += group
            continue
        chunks.append([])
        for row in group:
            if chunks[-1] and not _fits(bank, chunks[-1] + [row], micro_batch):
                chunks.append([])
            chunks[-1].append(row)
    return [sorted(chunk, key=lambda r: r[0]) for chunk in chunks]  # adapters contiguous within a micro-batch


def _fits(bank: TrainableBank, chunk: list, micro_batch: int) -> bool:
    return len(chunk) <= micro_batch and not _layout(bank, *_names_samples(chunk))[1]


def _layout(bank: TrainableBank, names: list[str], samples: list[Sample]) -> tuple[bool, bool]:
    """(shared-prefix path, decoder layers checkpointed) of one training micro-batch."""
    padded, shared_tokens = decoder_tokens(bank, names, samples)
    shared = shared_tokens < padded and not (CHECKPOINT_LAYERS and shared_tokens >= CHECKPOINT_MIN_TOKENS)
    return shared, not shared and CHECKPOINT_LAYERS and padded >= CHECKPOINT_MIN_TOKENS


def _names_samples(chunk) -> tuple[list[str], list[Sample]]:
    return [slot for slot, _, _ in chunk], [sample for _, sample, _ in chunk]


PACK_TOKENS = True
"""Pack micro-batches by decoder tokens (:func:`micro_batches`; a gsm-shaped update: 0.82x the CPU time)."""


def _chunk_loss(
    bank: TrainableBank,
    chunk,
    tokens: dict[str, int],
    old: torch.Tensor | None,
    ref: torch.Tensor | None,
    clip_eps: float,
    kl_coef: float,
) -> tuple[list[str], torch.Tensor, list[float]]:
    """One micro-batch, forward and backward (gradients accumulate in the adapters): its slots,
    each row's share of its adapter's token-mean loss (B,) (detached), and each row's summed
    token entropy (nats). Backward runs inside the routing context: with
    :data:`CHECKPOINT_LAYERS` the decoder layers are recomputed there, hooks included."""
    names = [slot for slot, _, _ in chunk]
    samples = [sample for _, sample, _ in chunk]
    shared, recompute = _layout(bank, names, samples)
    with nullcontext() if shared else routed(bank, names, train=True), _checkpointed_layers(bank.model, recompute):
        if shared:
            logp, mask, entropy = shared_prefix_logprobs(bank, names, samples, entropy=True, train=True)
        else:
            logp, mask, entropy = completion_logprobs(bank.model, samples, entropy=True)
        old = logp.detach() if old is None else old
        ratio = torch.exp(logp - old)
        adv = torch.tensor([a for _, _, a in chunk], device=logp.device).unsqueeze(1)
        per_token = -torch.minimum(ratio * adv, ratio.clamp(1 - clip_eps, 1 + clip_eps) * adv)
        if ref is not None:
            delta = ref - logp
            per_token = per_token + kl_coef * (torch.exp(delta) - delta - 1)
        weight = torch.tensor([1.0 / tokens[slot] for slot in names], device=logp.device).unsqueeze(1)
        per_row = (per_token * mask * weight).sum(dim=1)
        per_row.sum().backward()
    return names, per_row.detach(), (entropy * mask).sum(dim=1).tolist()


CHECKPOINT_LAYERS = True
"""Recompute each decoder layer's activations in backward instead of keeping them (torch
non-reentrant checkpointing). SmolLM2-135M, micro-batch 4 × ~430 tokens: the kept activations
are ~78 MB per layer, 2.3 GB over 30 layers, against one extra forward per micro-batch."""

CHECKPOINT_MIN_TOKENS = 256
"""Checkpoint only micro-batches of at least this many decoder tokens (rows × longest row, or
the shared-prefix count, see :data:`evolora.generation.completion.SHARE_PREFIXES`): below it the extra forward costs time
and saves little memory. At 1024 the gsm student micro-batches (4 × ~230 tokens) went
unchecked and the default gsm run peaked at 3.2 GB instead of 2.7 GB; at 512 an unchecked
micro-batch of SmolLM2-135M bf16 kept ~1.4 MB of activations per token (a 468-token teacher
group: 0.65 GB), and a recorded gsm update peaked 878 MB above its start against 690 MB at 256
(update time +16 %, 1 thread, load 9). Values are the same up to rounding order (a bf16 base
rounds a padded and a shared-prefix layout differently); only speed and memory change."""


@contextmanager
def _checkpointed_layers(model: CausalLM, on: bool) -> Iterator[None]:
    """Decoder-layer activation checkpointing of ``model`` (PEFT-wrapped or not) inside; a model
    without ``transformers``' checkpointing support runs unchanged."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    setter = getattr(base, "_set_gradient_checkpointing", None)
    if not on or setter is None or not getattr(base, "supports_gradient_checkpointing", False):
        yield
        return
    setter(enable=True, gradient_checkpointing_func=partial(checkpoint, use_reentrant=False))
    try:
        yield
    finally:
        setter(enable=False)


def _clip_and_step(
    params,
    jobs,
    max_grad_norm: float,
    epoch_loss: dict[str, float],
    finite: dict[str, bool],
    norms: dict[str, float],
    losses: dict[str, float],
) -> None:
    """Clip each adapter's gradient and step its optimizer unless its loss or norm is NaN/Inf
    (fills ``finite``, ``norms`` and ``losses`` in place)."""
    for slot, group in params.items():
        norms[slot] = float(torch.nn.utils.clip_grad_norm_(group, max_grad_norm))
        finite[slot] &= math.isfinite(norms[slot])
        if finite[slot]:
            jobs[slot][0].step()
            losses[slot] = epoch_loss[slot]
        jobs[slot][0].zero_grad(set_to_none=True)


def _set_trainable(params: dict[str, list[torch.nn.Parameter]], on: bool) -> None:
    for group in params.values():
        for param in group:
            param.requires_grad_(on)


def _no_grad_logps(bank: TrainableBank, chunk, base: bool = False) -> torch.Tensor:
    return routed_logprobs(bank, [BASE if base else slot for slot, _, _ in chunk], [sample for _, sample, _ in chunk])


def make_optimizer(params: list[torch.nn.Parameter], *, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """A fresh AdamW for one adapter (children start with fresh optimizer state)."""
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
