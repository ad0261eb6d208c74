"""The engine seam: what a bank asks of whatever generates its rollouts.

An :class:`Engine` is built once per bank with its model, tokenizer and bank
(``cls(model, tokenizer, bank)``), owns its decode, and does three things for the
:class:`evolora.bank.local.AdapterBank` that owns it:

* :meth:`Engine.generate`: one :class:`~evolora.generation.types.Completion` per (prompt, adapter)
  row, with :class:`~evolora.generation.types.Sampling` options, stop strings and
  :class:`~evolora.generation.types.Segment` s;
* :meth:`Engine.logprobs`: teacher-forced log-probs of samples under their adapters;
* :meth:`Engine.refresh`: called after every write of adapter factors (an RL update, a child,
  a rollback, a load), so an engine that keeps its own copy of the factors re-reads them.

Three engines ship, chosen once by ``generation.engine`` (:func:`make_engine`; a user's own is
registered, or named ``package.module:Class``: :mod:`evolora.generation.registry`):

========  =====================================================================================
eager     routed LoRA (:mod:`evolora.generation.routed`) in the preallocated-cache decode loop
          (:mod:`evolora.generation.decode`): the CPU engine, and the reference of the others.
graph     the eager loop with :class:`evolora.generation.graph.GraphDecoder` decoding each batch
          (a static KV cache and one captured CUDA-graph step per batch-size bucket); CUDA only.
peft      ``transformers``' ``generate`` with PEFT's ``adapter_names`` (the slow, independent
          reference the routed engine is tested against).
========  =====================================================================================

``auto`` is ``graph`` on CUDA for the model types its step computes (llama, mistral, qwen2,
qwen3) and ``eager`` elsewhere. Every engine scores log-probs with the routed teacher-forced forward
(:func:`evolora.generation.completion.routed_logprobs`), the same computation the policy update uses.
This module imports no task: the types it speaks are in :mod:`evolora.generation.types`.
Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-5 (rollouts, then the update that scores them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch
from transformers import StoppingCriteriaList

from evolora.generation.completion import routed_logprobs
from evolora.generation.decode import decode
from evolora.generation.kernels.stop_mask import FlaggedStop, stop_mask
from evolora.generation.registry import check_graph, engine_spec, resolve_engine
from evolora.generation.rollout import generate as generate_rows
from evolora.generation.rollout import min_new_tokens
from evolora.generation.routed import routed
from evolora.generation.segments import continue_segments, generate_segments
from evolora.generation.stops import StopOnText
from evolora.generation.types import Completion, RolloutStats, RoutedBank, Sampling, Segment
from evolora.model.device import model_device

if TYPE_CHECKING:
    from collections.abc import Callable

    from evolora.hf_types import CausalLM, Tokenizer

BATCH_SIZE = {"cpu": 16, "cuda": 256}
"""Rows per decode batch when the config leaves it to the engine (None), by device type: on a CPU a
decode step's cost grows with the rows (16 keeps the KV cache in cache-friendly sizes); on a GPU
a step costs about the same from 16 to 512 rows, so one batch should hold a whole step."""


@runtime_checkable
class Engine(Protocol):
    """What generates a bank's rollouts and scores its samples (see the module docstring), built
    once as ``cls(model, tokenizer, bank)``."""

    name: str
    """The engine's ``generation.engine`` name (``eager``, ``graph``, ``peft`` or a user's)."""
    batch_size: int
    """Rows per decode batch when a call gives none (:data:`BATCH_SIZE` by device)."""

    def generate(
        self,
        prompts: list[list[int]],
        adapters: list[str],
        sampling: Sampling,
        *,
        segments: tuple[Segment, ...] = (),
        batch_size: int | None = None,
        stats: RolloutStats | None = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        """N completions in the order of ``prompts`` (token id lists), row i by adapter ``adapters[i]``."""

    def logprobs(self, names: list[str], samples: list) -> torch.Tensor:
        """(B, T_c) float32 teacher-forced log-probs (nats) of each sample's completion under ``names[i]``."""

    def refresh(self, slots: list[str]) -> None:
        """The factors of ``slots`` were just written: re-read them if the engine keeps a copy."""


class EagerEngine:
    """Routed LoRA in the eager decode loop (:func:`evolora.generation.decode.decode`, segments
    continued in one cache: :func:`evolora.generation.segments.continue_segments`): the CPU engine
    and the reference.

    Args:
        model: the bank's PEFT model (``bank.model``); tokenizer: its tokenizer (a pad token is
            required; None: the engine scores log-probs but refuses to generate);
        bank: the in-process bank whose adapters route the rows.

    Raises:
        ValueError: ``model`` is not ``bank.model``.
    """

    name = "eager"

    def __init__(self, model: CausalLM, tokenizer: Tokenizer | None, bank: RoutedBank):
        if bank.model is not model:
            raise ValueError("an engine decodes its bank's own model; pass bank.model as the model")
        self.model, self.tokenizer, self.bank = model, tokenizer, bank
        self.batch_size = BATCH_SIZE.get(model_device(model).type, BATCH_SIZE["cpu"])
        self._stop_masks: dict[tuple, torch.Tensor] = {}  # stop strings -> their (V,) token mask

    def generate(
        self,
        prompts: list[list[int]],
        adapters: list[str],
        sampling: Sampling,
        *,
        segments: tuple[Segment, ...] = (),
        batch_size: int | None = None,
        stats: RolloutStats | None = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        """One completion per (prompt, adapter) row (PopuLoRA arXiv 2605.16727 §2 steps 2-3).

        Args:
            prompts: N prompts as token id lists; adapters: N slot names (or ``"__base__"``).
            sampling: how tokens are chosen and where free-form rows stop.
            segments: the structure of a multi-segment rollout (each with its own stop strings);
                empty: one free-form answer per row.
            batch_size: rows per decode batch; None: :attr:`batch_size`.
            stats: accumulates generated tokens and seconds; generator: the sampling RNG
                (None: torch's global one).

        Returns:
            N :class:`~evolora.generation.types.Completion`, in the order of ``prompts``.

        Raises:
            ValueError: the engine has no tokenizer, ``prompts`` and ``adapters`` differ in length, or
                ``segments`` come with ``sampling.greedy`` or ``sampling.stop`` (segments sample and
                stop on their own).
        """
        if self.tokenizer is None:
            raise ValueError(
                "this bank was built without a tokenizer, so it cannot generate; pass tokenizer= to AdapterBank"
            )
        options = dict(batch_size=batch_size or self.batch_size, stats=stats, generator=generator)
        if not segments:
            return generate_rows(
                self.model, self.tokenizer, prompts, adapters, sampling, decode=self.decode_batch, **options
            )
        if sampling.greedy or sampling.stop:
            raise ValueError("segments sample and carry their own stop strings; give neither greedy nor stop")
        return self._segments(prompts, adapters, tuple(segments), sampling, **options)

    def _segments(self, prompts, adapters, segments, sampling, **options) -> list[Completion]:
        """Multi-segment rows: each batch continues one cache through every segment."""
        return continue_segments(
            self.model,
            self.tokenizer,
            prompts,
            adapters,
            segments,
            sampling,
            context=lambda names: routed(self.bank, names),
            **options,
        )

    def _segments_per_call(self, prompts, adapters, segments, sampling, **options) -> list[Completion]:
        """Multi-segment rows as one :meth:`decode_batch` call per segment over the whole context so
        far: the ``_segments`` of the engines that cannot continue a cache (PEFT's ``generate``, the
        captured graph)."""
        return generate_segments(
            self.model, self.tokenizer, prompts, adapters, segments, sampling, decode=self.decode_batch, **options
        )

    def decode_batch(
        self,
        input_ids: torch.Tensor,
        attention: torch.Tensor,
        names: list[str],
        sampling: Sampling,
        *,
        eos_ids: set[int],
        generator: torch.Generator | None,
    ) -> torch.Tensor:
        """(B, t) new tokens of one left-padded batch (:data:`evolora.generation.rollout.BatchDecode`):
        routed LoRA through the preallocated-cache decode."""
        return decode(
            self.model,
            input_ids,
            attention,
            names,
            sampling,
            eos_ids=eos_ids,
            pad_id=self.tokenizer.pad_token_id,
            generator=generator,
            context=lambda rows: routed(self.bank, rows),
            stopped=self._stopped(sampling),
            min_new_tokens=min_new_tokens(self.model),
        )

    flag_stops = False
    """Whether the decode checks stop strings only on the rows whose new token could end one
    (:class:`~evolora.generation.kernels.stop_mask.FlaggedStop`; the mask is built once per stop set)."""

    def _stopped(self, sampling: Sampling):
        """The stop-string check of a decode (:meth:`evolora.generation.stops.StopOnText.tails`, with its
        token mask when :attr:`flag_stops` and the stops are strings), or None."""
        if not sampling.stop:
            return None
        tails = StopOnText(self.tokenizer, sampling.stop, 0).tails
        if not self.flag_stops or any(not isinstance(s, str) for s in sampling.stop):
            return tails  # a pattern stop could end on any token: every row is checked anyway
        if sampling.stop not in self._stop_masks:
            self._stop_masks[sampling.stop] = stop_mask(self.tokenizer, sampling.stop, size=vocab_rows(self.model))
        return FlaggedStop(tails, self._stop_masks[sampling.stop])

    @torch.no_grad()
    def logprobs(self, names: list[str], samples: list) -> torch.Tensor:
        """(B, T_c) float32 log-probs (nats) of each sample's completion under ``names[i]``, 0 on
        padding: :func:`evolora.generation.completion.routed_logprobs`."""
        return routed_logprobs(self.bank, list(names), list(samples))

    def refresh(self, slots: list[str]) -> None:
        """Nothing to do: the routed hooks read the bank's factors at every call."""


class PeftEngine(EagerEngine):
    """``transformers``' ``generate`` with PEFT's mixed-adapter batches (``adapter_names``): the
    independent reference of the routed engines, the same tokens greedy and seed for seed. It
    always samples from torch's global RNG (a ``generator`` is not used). Multi-segment rows run
    one ``generate`` call per segment over the whole context so far."""

    name = "peft"

    _segments = EagerEngine._segments_per_call

    def decode_batch(
        self,
        input_ids: torch.Tensor,
        attention: torch.Tensor,
        names: list[str],
        sampling: Sampling,
        *,
        eos_ids: set[int],
        generator: torch.Generator | None,
    ) -> torch.Tensor:
        """(B, t) new tokens of one batch: ``transformers``' ``generate`` with PEFT ``adapter_names``."""
        width = input_ids.shape[1]
        kwargs = (
            dict(do_sample=False)
            if sampling.greedy
            else dict(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0)
        )
        criteria = StoppingCriteriaList([StopOnText(self.tokenizer, sampling.stop, width)]) if sampling.stop else None
        output = self.model.generate(
            stopping_criteria=criteria,
            input_ids=input_ids,
            attention_mask=attention,
            max_new_tokens=sampling.max_new_tokens,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=sorted(eos_ids),
            adapter_names=names,
            **kwargs,
        )
        return output[:, width:]


class GraphEngine(EagerEngine):
    """The eager engine's batching with a static-shape decoder decoding each batch: by default
    :class:`evolora.generation.graph.GraphDecoder` (CUDA graphs, factors at fixed addresses).

    The decoder is built on first use and told of every factor write through :meth:`refresh`.
    Multi-segment rows run one decode per segment over the whole context so far.

    Args:
        model, tokenizer, bank: as :class:`EagerEngine`; decoder: ``bank -> decoder`` with
            ``decode(input_ids, attention, names, sampling, *, eos_ids, pad_id, generator, stopped,
            min_new_tokens) -> (B, t) long`` (the contract of :func:`evolora.generation.decode.decode`)
            and ``refresh(slots)``; None: ``GraphDecoder``.

    Raises:
        ValueError: no decoder given and the model is not on a CUDA device or of a type the step
            computes (:func:`evolora.generation.registry.check_graph`).
    """

    name = "graph"
    flag_stops = True

    def __init__(self, model: CausalLM, tokenizer: Tokenizer | None, bank: RoutedBank, decoder: Callable | None = None):
        super().__init__(model, tokenizer, bank)
        if decoder is None:
            check_graph(model_device(model), model_type(model))
            from evolora.generation.graph import GraphDecoder

            decoder = GraphDecoder
        self._factory, self.decoder = decoder, None

    def generate(
        self,
        prompts: list[list[int]],
        adapters: list[str],
        sampling: Sampling,
        *,
        segments: tuple[Segment, ...] = (),
        batch_size: int | None = None,
        stats: RolloutStats | None = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        """As :meth:`EagerEngine.generate`, in batches of at most the largest graph bucket (512 rows)."""
        from evolora.generation.graph import BUCKETS

        return super().generate(
            prompts,
            adapters,
            sampling,
            segments=segments,
            stats=stats,
            batch_size=min(batch_size or self.batch_size, max(BUCKETS)),
            generator=generator,
        )

    _segments = EagerEngine._segments_per_call

    def decode_batch(
        self,
        input_ids: torch.Tensor,
        attention: torch.Tensor,
        names: list[str],
        sampling: Sampling,
        *,
        eos_ids: set[int],
        generator: torch.Generator | None,
    ) -> torch.Tensor:
        """(B, t) new tokens of one batch from the graph decoder (built on first use)."""
        if self.decoder is None:
            self.decoder = self._factory(self.bank)
        return self.decoder.decode(
            input_ids,
            attention,
            names,
            sampling,
            eos_ids=eos_ids,
            pad_id=self.tokenizer.pad_token_id,
            generator=generator,
            stopped=self._stopped(sampling),
            min_new_tokens=min_new_tokens(self.model),
        )

    def refresh(self, slots: list[str]) -> None:
        """Copy the new factors of ``slots`` into the decoder's fixed buffers (nothing before its first use)."""
        if self.decoder is not None:
            self.decoder.refresh(list(slots))


def vocab_rows(model: CausalLM) -> int:
    """V, the rows of the model's output embedding (the ids a decode can choose)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_output_embeddings().weight.shape[0]


def model_type(model: CausalLM) -> str:
    """``config.model_type`` of a causal LM (PEFT-wrapped or not), e.g. ``"llama"``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.config.model_type


def make_engine(name: str, model: CausalLM, tokenizer: Tokenizer | None, bank: RoutedBank) -> Engine:
    """The engine ``name`` (``generation.engine``: a registered name or ``package.module:Class``;
    ``auto`` resolved on the model's device and type) built for ``bank``: ``cls(model, tokenizer, bank)``.

    Raises:
        ValueError: an unknown name or a class that does not import, ``graph`` where it cannot run
            (:func:`evolora.generation.registry.check_graph`), or ``model`` that is not ``bank.model``.
    """
    return engine_spec(resolve_engine(name, model_device(model), model_type(model))).load()(model, tokenizer, bank)
