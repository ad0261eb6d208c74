"""Engine-neutral types of generation: what a rollout asks for and what it gives back.

:class:`Segment` (one part of a structured rollout), :class:`Sampling` (how tokens are chosen and
where a row stops), :class:`Completion` (one generated row), :class:`RolloutStats`, and
:class:`RoutedBank` (what generation reads of an in-process adapter bank). Every engine
(:mod:`evolora.generation.engine`) takes and returns these; this module imports nothing else of
evolora, so engines, banks and tasks share it without importing each other.
Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-3 (the rollouts of teachers and students).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

Stop = str | re.Pattern[str]
"""Where a rollout ends besides EOS and the token cap: a string (once the text holds it) or a compiled
pattern (once the text matches it; :mod:`evolora.generation.stops`)."""


@dataclass(frozen=True)
class Segment:
    """One generated part of a structured teacher rollout (multi-segment generation).

    Generation of the part starts after ``forced`` (text appended to the context, never
    sampled and never trained on) and stops at EOS, at ``max_new_tokens``, or once the
    generated text holds one of ``stop``. With ``keep_stop=False`` the token that completed
    the stop string is dropped (and so never trained on); the next segment's ``forced``
    text follows what was kept.

    Attributes:
        forced: text placed before this part ("" for none; the first segment's forced
            text is the request's ``prefix``).
        stop: stop strings (empty: EOS or the token limit only).
        max_new_tokens: token limit of this part, >= 1; None uses the role's limit.
        keep_stop: keep the token that completed a stop string.
        temperature: sampling temperature of this part, > 0; None uses the role's.
    """

    forced: str = ""
    stop: tuple[str, ...] = ()
    max_new_tokens: int | None = None
    keep_stop: bool = True
    temperature: float | None = None


@dataclass(frozen=True)
class Sampling:
    """How one rollout call chooses tokens and where its rows stop.

    Attributes:
        max_new_tokens: cap on generated tokens per row (per segment without its own), >= 1.
        greedy: argmax decoding (held-out evaluation) instead of sampling.
        temperature: logits / temperature before sampling, > 0 (ignored when greedy).
        top_p: nucleus mass, 0 < p <= 1 (1: the whole distribution).
        stop: stops of a free-form rollout, strings or compiled patterns (:data:`Stop`); a row ends
            once its text holds or matches one (segments carry their own).
        keep_stop: keep the tokens through the stop string (else every token holding part of it
            is dropped).

    Raises:
        ValueError: ``max_new_tokens < 1``, ``temperature <= 0`` when sampling, ``top_p`` outside (0, 1], or an
            empty stop string.
    """

    max_new_tokens: int
    greedy: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[Stop, ...] = ()
    keep_stop: bool = True

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature <= 0 and not self.greedy:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if any(not s for s in self.stop):
            raise ValueError("an empty stop string would end every row at once")
        object.__setattr__(self, "stop", tuple(self.stop))


@dataclass(frozen=True)
class Completion:
    """One generated sequence.

    Attributes:
        adapter: the adapter slot that generated it (or ``"__base__"``).
        prompt_ids: prompt token ids, no padding, length T_p.
        completion_ids: generated token ids up to and including EOS (no padding), length T_c.
        text: decoded completion without special tokens.
        truncated: True when generation stopped at ``max_new_tokens`` without EOS or a stop string.
        mask: per completion token, True when it was sampled (trained on) and False when it
            was forced text (:func:`evolora.generation.segments.generate_segments`); None: all sampled.
    """

    adapter: str
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    text: str
    truncated: bool
    mask: tuple[bool, ...] | None = None


@dataclass
class RolloutStats:
    """Tokens generated and seconds spent, summed over calls."""

    tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@runtime_checkable
class RoutedBank(Protocol):
    """What generation reads of a bank whose adapters sit in this process on one model
    (:class:`evolora.bank.local.AdapterBank` is one; :class:`evolora.bank.LocalBank` extends this).

    Factors per adapted layer and slot: A ``layer.lora_A[slot].weight`` (r, d_in), B
    ``layer.lora_B[slot].weight`` (d_out, r); ΔW = (alpha / r) · B A.
    """

    model: Any
    """The frozen base model (a ``transformers`` causal LM, PEFT-wrapped) the adapters are attached to."""
    slots: list[str]
    """The slot names, in routing order (slot index i is ``slots[i]``)."""
    rank: int
    """LoRA rank r of every slot."""
    alpha: float
    """LoRA alpha; ΔW = (alpha / rank) · B A."""
    layers: Any
    """The adapted linear layers (PEFT ``LoraLayer``), {module name: layer} in the model's order."""
