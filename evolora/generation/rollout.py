"""Batched rollouts: one ``generate`` call serves many adapters at once (mixed-adapter batches).

Rows are grouped into batches of similar prompt length to limit padding, and each batch is
decoded by the engine's own batch decode (:data:`BatchDecode`; :mod:`evolora.generation.engine`):
routed LoRA in the preallocated-cache loop of :mod:`evolora.generation.decode`, the graph decoder,
or ``transformers``' ``generate`` with PEFT's ``adapter_names``. Also the chat prompts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from jinja2.exceptions import TemplateError

from evolora.generation import heap
from evolora.generation.stops import end_of_turn_ids, stop_cut
from evolora.generation.types import (  # Completion, RolloutStats re-exported: the rollout API
    Completion,
    RolloutStats,
    Sampling,
    Stop,
)
from evolora.model.device import model_device

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM, Tokenizer


def chat_prompt(tokenizer: Tokenizer, messages: list[dict[str, str]], prefix: str = "") -> list[int]:
    """Token ids of ``messages`` rendered with the tokenizer's chat template plus the assistant
    header, then ``prefix`` (a forced start of the answer such as ``"Problem:"`` or
    ``"Verdict:"``, tokenized on its own; "" for none)."""
    text = render_chat(tokenizer, messages)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids + tokenizer(prefix, add_special_tokens=False)["input_ids"] if prefix else ids


PLAIN_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] | capitalize }}: {{ message['content'] }}\n\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
"""The chat template of a base model that has none: ``User: ...`` turns, then ``Assistant:``."""


def render_chat(tokenizer: Tokenizer, messages: list[dict[str, str]]) -> str:
    """``messages`` as text in the tokenizer's chat template, with the assistant header.

    A tokenizer without a template (a base model) gets :data:`PLAIN_TEMPLATE`. A template that
    rejects the system role (Gemma 2 raises) gets the system prompt folded into the first user
    turn, separated by a blank line.
    """
    template = None if getattr(tokenizer, "chat_template", None) else PLAIN_TEMPLATE
    try:
        return tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, chat_template=template
        )
    except TemplateError as error:  # Gemma 2: "System role not supported"
        if not messages or messages[0]["role"] != "system" or "system" not in str(error).lower():
            raise
    folded = fold_system(messages)
    return tokenizer.apply_chat_template(folded, add_generation_prompt=True, tokenize=False, chat_template=template)


def fold_system(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    r"""The system prompt moved into the first user turn (for templates without a system role).

    >>> fold_system([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    [{'role': 'user', 'content': 'Be brief.\n\nHi'}]
    """
    if not messages or messages[0]["role"] != "system":
        return list(messages)
    system, rest = messages[0]["content"], list(messages[1:])
    if rest and rest[0]["role"] == "user":
        return [{"role": "user", "content": f"{system}\n\n{rest[0]['content']}"}, *rest[1:]]
    return [{"role": "user", "content": system}, *rest]


@torch.no_grad()
def generate(
    model: CausalLM,
    tokenizer: Tokenizer,
    prompts: list[list[int]],
    adapters: list[str],
    sampling: Sampling,
    *,
    decode: BatchDecode,
    batch_size: int = 16,
    stats: RolloutStats | None = None,
    generator: torch.Generator | None = None,
) -> list[Completion]:
    """Generate one completion per (prompt, adapter) row, many adapters per batch, each batch by
    an engine's ``decode`` (:meth:`evolora.generation.engine.EagerEngine.decode_batch` and its kin).

    Args:
        model: the model ``decode`` runs (its device holds the batches; its EOS ids end rows).
        tokenizer: its tokenizer (a pad token is required).
        prompts: N prompts as token id lists (no padding).
        adapters: N adapter names, one per prompt (``"__base__"`` for the base model).
        sampling: how tokens are chosen, the cap per row, and the stop strings or patterns
            (:data:`~evolora.generation.types.Stop`) that end a row, kept or cut (``keep_stop``).
        decode: the :data:`BatchDecode` of one left-padded batch.
        batch_size: rows per batch (rows sorted by prompt length, then grouped by adapter in a batch).
        stats: accumulates generated tokens and seconds when given.
        generator: the sampling RNG handed to ``decode`` (None: torch's global one).

    Returns:
        N completions in the order of ``prompts``.

    Raises:
        ValueError: when ``prompts`` and ``adapters`` differ in length.
    """
    if len(prompts) != len(adapters):
        raise ValueError(f"{len(prompts)} prompts but {len(adapters)} adapter names; give one name per prompt")
    model.eval()
    eos_ids = end_of_turn_ids(model, tokenizer)
    device = model_device(model)  # every batch, cache and draw of the decode lives there
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    results: list[Completion | None] = [None] * len(prompts)
    for start in range(0, len(order), batch_size):
        rows = sorted(order[start : start + batch_size], key=lambda i: adapters[i])  # grouped: routed views rows
        began = time.perf_counter()
        input_ids, attention = left_pad([prompts[i] for i in rows], tokenizer.pad_token_id, device)
        new = decode(input_ids, attention, [adapters[i] for i in rows], sampling, eos_ids=eos_ids, generator=generator)
        for j, i in enumerate(rows):
            results[i] = completion_of(
                tokenizer, prompts[i], adapters[i], new[j].tolist(), eos_ids, sampling.stop, sampling.keep_stop
            )
        if stats is not None:
            stats.seconds += time.perf_counter() - began
            stats.tokens += sum(len(results[i].completion_ids) for i in rows)
    heap.trim()  # the KV caches just freed (see evolora.generation.heap)
    return results  # type: ignore[return-value]


def left_pad(
    prompts: list[list[int]], pad_id: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) input ids and attention mask on ``device``, left padded: completions start at column T.
    Built on the CPU and moved in one copy each (not one small copy per row)."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device="cpu")
    attention = torch.zeros((len(prompts), width), dtype=torch.long, device="cpu")
    for j, prompt in enumerate(prompts):
        input_ids[j, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long, device="cpu")
        attention[j, width - len(prompt) :] = 1
    return input_ids.to(device), attention.to(device)


BatchDecode = Callable[..., torch.Tensor]
"""One left-padded batch's new tokens, an engine's own decode: ``(input_ids (B, T_p), attention (B, T_p),
names, sampling, *, eos_ids, generator) -> (B, t) long``, t <= ``sampling.max_new_tokens``,
``pad_token_id`` after a row's EOS or stop string (:func:`evolora.generation.decode.decode`'s contract)."""


def min_new_tokens(model: CausalLM) -> int:
    """The model's ``generation_config.min_new_tokens`` (0 when unset): EOS is masked out before it."""
    return getattr(getattr(model, "generation_config", None), "min_new_tokens", None) or 0


def completion_of(
    tokenizer: Tokenizer,
    prompt: list[int],
    adapter: str,
    ids: list[int],
    eos_ids: set[int],
    stop: tuple[Stop, ...],
    keep_stop: bool,
) -> Completion:
    """One row's completion: cut after its first EOS, or at its stop string."""
    end = next((k + 1 for k, t in enumerate(ids) if t in eos_ids), None)
    kept = ids[:end] if end is not None else ids  # no EOS: the row ran all max_new_tokens
    cut = stop_cut(tokenizer, kept, stop, keep_stop) if stop else None
    if cut is not None:
        kept, end = kept[:cut], cut
    return Completion(
        adapter=adapter,
        prompt_ids=tuple(prompt),
        completion_ids=tuple(kept),
        text=tokenizer.decode(kept, skip_special_tokens=True),
        truncated=end is None,
    )
