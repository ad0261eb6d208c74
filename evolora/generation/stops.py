"""Where a rollout ends: end-of-turn token ids and stop strings, in one place.

    eos = end_of_turn_ids(model, tokenizer)           # every id that ends a turn
    stopped = StopOnText(tokenizer, ("\\n",), start).tails   # per-row check inside the decode loop
    keep = stop_cut(tokenizer, ids, ("\\n",), keep=True)    # how many tokens of a finished row to keep

A stop is a string (the row ends once its text holds it) or a compiled :class:`re.Pattern` (once
its text matches it, e.g. a task's finished answer line: :attr:`evolora.tasks.base.Task.answer_stop`).

The decode loop (:mod:`evolora.generation.decode`) only calls the ``stopped`` callback it is
given; the rollouts (:mod:`evolora.generation.rollout`, :mod:`evolora.generation.segments`)
build it here. Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-3 (rollouts of every role).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import torch
from transformers import StoppingCriteria

from evolora.generation.types import Stop

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM, Tokenizer


PATTERN_WINDOW = 24
"""Generated tokens a pattern stop is matched against (a whole answer line such as ``#### 1,234``)."""


def holds(text: str, stop: Stop) -> bool:
    """Whether ``text`` holds the stop string, or matches the stop pattern somewhere."""
    return stop.search(text) is not None if isinstance(stop, re.Pattern) else stop in text


def stop_start(text: str, stop: Stop) -> int:
    """Character index in ``text`` where the stop (string or pattern match) first starts; ``text`` holds it."""
    return stop.search(text).start() if isinstance(stop, re.Pattern) else text.index(stop)


class StopOnText(StoppingCriteria):
    """Per-row stop once the last few generated tokens decode to text holding a stop string (or
    matching a stop pattern: then the last :data:`PATTERN_WINDOW` tokens)."""

    def __init__(self, tokenizer: Tokenizer, stops: tuple[Stop, ...], start: int, window: int = 8) -> None:
        if any(isinstance(s, re.Pattern) for s in stops):
            window = max(window, PATTERN_WINDOW)
        self.tokenizer, self.stops, self.start, self.window = tokenizer, stops, start, window

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        return self.tails(input_ids[:, self.start :])

    def tails(self, generated: torch.Tensor, *_) -> torch.Tensor:
        """(B,) bool on ``generated``'s device: the last ``window`` of the (B, t) generated tokens hold a stop string."""
        texts = self.tokenizer.batch_decode(generated[:, -self.window :].tolist(), skip_special_tokens=True)
        return torch.tensor(
            [any(holds(text, s) for s in self.stops) for text in texts], dtype=torch.bool, device=generated.device
        )


def stop_cut(tokenizer: Tokenizer, ids: list[int], stops: tuple[Stop, ...], keep: bool) -> int | None:
    """Tokens to keep of a row that wrote a stop string, or None when it wrote none.

    ``keep``: the shortest prefix whose text holds a stop string. Else the longest prefix
    whose text ends before the stop string starts (every token that is part of it dropped).
    """
    decode = lambda k: tokenizer.decode(ids[:k], skip_special_tokens=True)  # noqa: E731
    if not any(holds(decode(len(ids)), s) for s in stops):
        return None
    k = next(k for k in range(1, len(ids) + 1) if any(holds(decode(k), s) for s in stops))
    if keep:
        return k
    text = decode(k)
    start = min(stop_start(text, s) for s in stops if holds(text, s))
    return max(j for j in range(k) if len(decode(j)) <= start)


def end_of_turn_ids(model: CausalLM, tokenizer: Tokenizer) -> set[int]:
    """Every token id that ends a rollout: the model's ``generation_config.eos_token_id`` (an id or a
    list, e.g. Llama 3's ``<|end_of_text|>`` and ``<|eot_id|>``) and the tokenizer's ``eos_token``.

    Raises:
        ValueError: the model and the tokenizer name no end-of-turn token.
    """
    ids = model.generation_config.eos_token_id if model.generation_config is not None else None
    ids = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("the model has no EOS token; set generation_config.eos_token_id")
    return ids
