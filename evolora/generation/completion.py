"""Log-probabilities of sampled completions, with the prompt of a GRPO group computed once.

Two layouts give the same values (fp32 reassociation only):

* :func:`completion_logprobs`: every row ``[pad… prompt | completion …pad]`` through the
  decoder in one forward of B × (T_p + T_c) tokens.
* :func:`shared_prefix_logprobs`: the U distinct (adapter, prompt) pairs first, with a KV
  cache, U × T_p tokens; then the B completions on that cache, B × T_c tokens. The cache
  keeps its graph, so the gradient of every completion flows back into its prompt's
  keys and values through the adapter, exactly as in the one-forward layout. A GRPO group
  is n samples of one prompt by one adapter (PopuLoRA, arXiv 2605.16727, §2 step 5; GRPO,
  arXiv 2402.03300), so an arith student micro-batch of 8 rows × (47 prompt + 24 completion)
  tokens runs 47 + 8 · 24 = 239 decoder tokens instead of 568.

The LM head only ever runs on completion positions, through
:func:`evolora.generation.logprobs.token_logprobs` (no full-vocabulary log-softmax kept for backward).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import torch
import torch.nn.functional as F

from evolora.generation.logprobs import token_logprobs
from evolora.generation.routed import routed
from evolora.generation.types import RoutedBank
from evolora.model.device import model_device
from evolora.model.prepack import head_linear

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM


def completion_logprobs(model: CausalLM, samples: Sequence, *, entropy: bool = False):
    """Log-probabilities of each sample's completion tokens under ``model``'s active adapter.

    Rows are laid out ``[pad… prompt | completion …pad]`` so every completion starts at
    the same column; the LM head only runs on completion positions, in chunks through
    :func:`evolora.generation.logprobs.token_logprobs` (no full-vocabulary log-softmax is kept for
    backward), and on padding not at all.

    Args:
        model: a causal LM (PEFT-wrapped or not); routing, if any, is the caller's context.
        samples: :class:`evolora.learner.Sample` rows (``prompt_ids``, ``completion_ids``, ``mask``).

    Shapes: returns ``logp`` (B, T_c) float32 and ``mask`` (B, T_c) bool, T_c = longest completion
    (``mask`` is False on padding and on forced tokens, see :attr:`Sample.mask`; ``logp`` is 0
    on padding); with ``entropy=True`` also the policy's token entropy (B, T_c) in nats (no gradient).
    """
    prompt_width = max(len(s.prompt_ids) for s in samples)
    device = model_device(model)
    prompt_ids, prompt_attention = _left_padded([s.prompt_ids for s in samples], prompt_width, device)
    completion_ids, completion_attention, mask = _right_padded(samples, device)
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([prompt_attention, completion_attention], dim=1)
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)  # as in generate() with left padding
    inputs = dict(input_ids=input_ids, attention_mask=attention, position_ids=position_ids, use_cache=False)
    body, head = body_and_head(model)
    if body is None:  # a head this path does not know: full logits (B, T_c, V)
        logits = model(**inputs, logits_to_keep=completion_ids.shape[1] + 1).logits[:, :-1]
        logp = -F.cross_entropy(logits.float().transpose(1, 2), completion_ids, reduction="none")
        log_p = torch.log_softmax(logits.detach().float(), dim=-1)
        return (logp, mask, -(log_p.exp() * log_p).sum(-1)) if entropy else (logp, mask)
    hidden = body(**inputs).last_hidden_state[:, prompt_width - 1 : -1]  # (B, T_c, d): position t predicts token t
    return _scored(hidden, head, completion_ids, completion_attention, mask, entropy)


def shared_prefix_logprobs(
    bank: RoutedBank, names: Sequence[str], samples: Sequence, *, entropy: bool = False, train: bool = False
):
    """:func:`completion_logprobs` of routed rows, each distinct (adapter, prompt) prefilled once.

    The U distinct pairs run first (left-padded to the longest prompt, T_p) through
    ``routed(bank, their adapters)`` with a KV cache; the cache rows are then gathered to the
    B samples (a differentiable index) and the completions (right-padded, T_c) run on it through
    ``routed(bank, names)``. The hidden state that predicts completion token 0 is the prompt's
    last position. Backward may run after both contexts have closed (no hook runs in backward),
    so this path must not be combined with activation checkpointing, which reruns the forward.

    Args:
        bank: the :class:`evolora.bank.local.AdapterBank` whose model is scored.
        names: one adapter slot (or ``"__base__"``) per sample.
        samples: :class:`evolora.learner.Sample` rows.
        entropy: also return the token entropy.
        train: keep the graph to the adapters (the routed training path).

    Shapes: as :func:`completion_logprobs`: ``logp`` (B, T_c) float32, ``mask`` (B, T_c) bool
    [, entropy (B, T_c) nats].

    Raises:
        ValueError: ``names`` and ``samples`` differ in length, or the model's LM head is not a
            plain linear map (use :func:`completion_logprobs` for such models).
    """
    if len(names) != len(samples):
        raise ValueError(f"{len(names)} adapter names for {len(samples)} samples")
    body, head = body_and_head(bank.model)
    if body is None:
        raise ValueError("shared-prefix log-probs need a decoder body and a plain linear LM head")
    keys = [(name, tuple(s.prompt_ids)) for name, s in zip(names, samples)]
    order = {key: u for u, key in enumerate(dict.fromkeys(keys))}
    device = model_device(bank.model)
    index = torch.tensor([order[key] for key in keys], device=device)
    prompts = [prompt for _, prompt in order]
    prompt_ids, prompt_attention = _left_padded(prompts, max(len(p) for p in prompts), device)
    with routed(bank, [name for name, _ in order], train=train):
        prefix = body(
            input_ids=prompt_ids,
            attention_mask=prompt_attention,
            position_ids=(prompt_attention.cumsum(-1) - 1).clamp(min=0),
            use_cache=True,
        )
    cache = prefix.cache
    cache.batch_select_indices(index)  # (U, …) -> (B, …), keeps the graph
    completion_ids, completion_attention, mask = _right_padded(samples, device)
    lengths = prompt_attention.sum(-1)[index]  # (B,) real prompt tokens
    positions = lengths[:, None] + torch.arange(completion_ids.shape[1], device=device)[None]
    attention = torch.cat([prompt_attention[index], completion_attention], dim=1)
    with routed(bank, list(names), train=train):
        rest = body(
            input_ids=completion_ids, attention_mask=attention, position_ids=positions, cache=cache, use_cache=True
        ).last_hidden_state  # (B, T_c, d)
    last = prefix.last_hidden_state[:, -1][index]  # (B, d): predicts completion token 0
    hidden = torch.cat([last[:, None], rest[:, :-1]], dim=1)
    return _scored(hidden, head, completion_ids, completion_attention, mask, entropy)


@torch.no_grad()
def routed_logprobs(bank: RoutedBank, names: list[str], samples: Sequence) -> torch.Tensor:
    """Log-probs (B, T_c) float32 (nats) of each sample's completion under its own adapter ``names[i]``
    (or ``"__base__"``), without gradient; 0 on padding. Each distinct (adapter, prompt) is
    prefilled once when that saves decoder tokens (:data:`SHARE_PREFIXES`), else one padded
    forward; the values are the same either way (PopuLoRA arXiv 2605.16727 §2 step 5).
    What every shipped engine's ``logprobs`` returns, and the no-gradient half of the update."""
    padded, shared_tokens = decoder_tokens(bank, names, samples)
    if shared_tokens < padded:
        return shared_prefix_logprobs(bank, names, samples)[0]
    with routed(bank, names):
        return completion_logprobs(bank.model, samples)[0]


SHARE_PREFIXES = True
"""Prefill each distinct (adapter, prompt) of a micro-batch once and run its completions on
the cache (:func:`shared_prefix_logprobs`) when that saves decoder tokens (the learner also keeps
the shared layout below :data:`evolora.learner.CHECKPOINT_MIN_TOKENS`: it cannot be checkpointed):
an arith student micro-batch, 8 × (47 + 24) = 568 padded tokens, checkpointed before, runs
47 + 8 · 24 = 239 unchecked. Same values; only speed changes."""


def decoder_tokens(bank: RoutedBank, names: Sequence[str], samples: Sequence) -> tuple[int, int]:
    """Decoder tokens of a micro-batch as one padded forward (B · (T_p + T_c)) and with shared
    prefixes (U · T_p + B · T_c; the padded count when sharing is off or not possible)."""
    prompt = max(len(s.prompt_ids) for s in samples)
    completion = max(len(s.completion_ids) for s in samples)
    padded = len(samples) * (prompt + completion)
    if not SHARE_PREFIXES or body_and_head(bank.model)[0] is None:
        return padded, padded
    return padded, distinct_prefixes(names, samples) * prompt + len(samples) * completion


def distinct_prefixes(names: Sequence[str], samples: Sequence) -> int:
    """How many distinct (adapter, prompt) pairs the rows hold (U ≤ B)."""
    return len({(name, tuple(s.prompt_ids)) for name, s in zip(names, samples)})


def body_and_head(model: CausalLM):
    """(decoder body returning ``last_hidden_state``, bias-free linear LM head) of a causal LM
    (PEFT-wrapped or not), or (None, None) when the head is not a plain linear map."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    body = base.get_decoder() if hasattr(base, "get_decoder") else None
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    config = base.config
    plain = (
        isinstance(head, torch.nn.Linear)
        and head.bias is None
        and hasattr(head, "weight")
        and not getattr(config, "final_logit_softcapping", None)
        and getattr(config, "logits_scaling", 1) == 1
    )
    return (body, head) if body is not None and plain and body is not base else (None, None)


def _left_padded(prompts: Sequence[Sequence[int]], width: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention), both (N, width) long on ``device``, each prompt right-aligned (pad id 0);
    built on the CPU, moved in one copy each."""
    ids = torch.zeros((len(prompts), width), dtype=torch.long, device="cpu")
    attention = torch.zeros((len(prompts), width), dtype=torch.long, device="cpu")
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long, device="cpu")
        attention[row, width - len(prompt) :] = 1
    return ids.to(device), attention.to(device)


def _right_padded(samples: Sequence, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Completions left-aligned, on ``device``: ids and attention (B, T_c) long, trained-token mask (B, T_c) bool."""
    width = max(len(s.completion_ids) for s in samples)
    ids = torch.zeros((len(samples), width), dtype=torch.long, device="cpu")
    attention = torch.zeros((len(samples), width), dtype=torch.long, device="cpu")
    mask = torch.zeros((len(samples), width), dtype=torch.bool, device="cpu")
    for row, sample in enumerate(samples):
        c = len(sample.completion_ids)
        ids[row, :c] = torch.tensor(sample.completion_ids, dtype=torch.long, device="cpu")
        attention[row, :c] = 1
        mask[row, :c] = True if sample.mask is None else torch.tensor(sample.mask, dtype=torch.bool, device="cpu")
    return ids.to(device), attention.to(device), mask.to(device)


def _scored(hidden, head, targets, attention, mask, entropy: bool):
    """Scatter the LM-head log-probs (and entropies) of the non-padding positions into (B, T_c)."""
    valid = attention.bool()
    logp_flat, entropy_flat = token_logprobs(hidden[valid], head.weight, targets[valid], linear=head_linear(head))
    logp = torch.zeros(valid.shape, dtype=torch.float32, device=valid.device).index_put((valid,), logp_flat)
    if entropy:
        return (
            logp,
            mask,
            torch.zeros(valid.shape, dtype=torch.float32, device=valid.device).index_put_((valid,), entropy_flat),
        )
    return logp, mask
