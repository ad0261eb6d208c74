"""Multi-segment rollouts: generate, append forced text, continue.

A small model that cannot hold a whole format in one free-form answer (the ``gsm``
teacher's problem *and* program) is given the structure: it writes the problem, the
rollout appends a forced code fence, the model writes the program and stops at the
closing fence. Every row is one sequence

    prompt | segment 1 (sampled) | forced text | segment 2 (sampled) | ...

and its :class:`evolora.generation.rollout.Completion` marks which completion tokens were sampled
(``mask``). The learner trains on exactly those tokens, with log-probs conditioned on the
same context they were sampled in (forced tokens included), so one forward pass over the
whole sequence gives the same log-probs as the rollout (tested).

Source: PopuLoRA (arXiv 2605.16727) §2 step 2 (the teacher's proposal, here structured).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, ContextManager

import torch

from evolora.generation import heap
from evolora.generation.decode import Decoder
from evolora.generation.rollout import BatchDecode, completion_of, generate, left_pad, min_new_tokens
from evolora.generation.stops import StopOnText, end_of_turn_ids
from evolora.generation.types import Completion, RolloutStats, Sampling, Segment
from evolora.model.device import model_device

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM, Tokenizer


def segment_sampling(sampling: Sampling, segment: Segment) -> Sampling:
    """The sampling of one segment: ``sampling`` (the role's) with the segment's own token limit,
    temperature (when set), stop strings and ``keep_stop``; segments always sample."""
    return replace(
        sampling,
        greedy=False,
        max_new_tokens=segment.max_new_tokens or sampling.max_new_tokens,
        temperature=segment.temperature if segment.temperature is not None else sampling.temperature,
        stop=segment.stop,
        keep_stop=segment.keep_stop,
    )


def generate_segments(
    model: CausalLM,
    tokenizer: Tokenizer,
    prompts: list[list[int]],
    adapters: list[str],
    segments: tuple[Segment, ...],
    sampling: Sampling,
    *,
    decode: BatchDecode,
    batch_size: int = 16,
    stats: RolloutStats | None = None,
    generator: torch.Generator | None = None,
) -> list[Completion]:
    """Generate every row through the same sequence of segments, one
    :func:`evolora.generation.rollout.generate` call per segment over the whole context so far.

    Args:
        prompts, adapters: N prompts as token ids (forced prefix included), N adapter names.
        segments: the structure (>= 1). Segment k's ``forced`` text is tokenized on its own
            and appended before it is generated. An EOS ends a segment, and the row only in
            the last segment; it is dropped from the middle of a row.
        sampling: the role's sampling; each segment samples with :func:`segment_sampling` of it.
        decode, batch_size, stats, generator: as :func:`evolora.generation.rollout.generate`.

    Returns:
        N completions: ``completion_ids`` hold every sampled and forced token in order,
        ``mask`` is True exactly on the sampled ones, ``truncated`` is the last segment's.

    Raises:
        ValueError: no segments, or ``prompts`` and ``adapters`` differ in length.
    """
    if not segments:
        raise ValueError("generate_segments needs at least one Segment; use rollout.generate for free-form answers")
    eos = end_of_turn_ids(model, tokenizer)
    ids: list[list[int]] = [[] for _ in prompts]
    mask: list[list[bool]] = [[] for _ in prompts]
    truncated = [False] * len(prompts)
    for k, segment in enumerate(segments):
        last = k == len(segments) - 1
        forced = tokenizer(segment.forced, add_special_tokens=False)["input_ids"] if segment.forced else []
        for row in range(len(prompts)):
            ids[row] += forced
            mask[row] += [False] * len(forced)
        outputs = generate(
            model,
            tokenizer,
            [list(p) + i for p, i in zip(prompts, ids)],
            adapters,
            segment_sampling(sampling, segment),
            decode=decode,
            batch_size=batch_size,
            stats=stats,
            generator=generator,
        )
        for row, output in enumerate(outputs):
            new = list(output.completion_ids)
            if not last and new and new[-1] in eos:
                new = new[:-1]  # the row goes on with the next segment's forced text
            ids[row] += new
            mask[row] += [True] * len(new)
            truncated[row] = output.truncated
    return [
        Completion(
            adapter=adapter,
            prompt_ids=tuple(prompt),
            completion_ids=tuple(row_ids),
            text=tokenizer.decode(row_ids, skip_special_tokens=True),
            truncated=trunc,
            mask=tuple(row_mask),
        )
        for adapter, prompt, row_ids, row_mask, trunc in zip(adapters, prompts, ids, mask, truncated)
    ]


def continue_segments(
    model: CausalLM,
    tokenizer: Tokenizer,
    prompts: list[list[int]],
    adapters: list[str],
    segments: tuple[Segment, ...],
    sampling: Sampling,
    *,
    context: Callable[[list[str]], ContextManager],
    batch_size: int = 16,
    stats: RolloutStats | None = None,
    generator: torch.Generator | None = None,
) -> list[Completion]:
    """:func:`generate_segments`' rows, every batch in one :class:`evolora.generation.decode.Decoder`:
    the prompt is prefilled once and each segment continues from the cache (tokens a segment drops
    are masked out of it). The eager engine's segments.

    Args:
        context: ``names -> context manager`` that routes those rows around every forward
            (:func:`evolora.generation.routed.routed` of the bank); the others as :func:`generate_segments`.

    Raises:
        ValueError: no segments, or ``prompts`` and ``adapters`` differ in length.
    """
    if not segments:
        raise ValueError("continue_segments needs at least one Segment; use rollout.generate for free-form answers")
    if len(prompts) != len(adapters):
        raise ValueError(f"{len(prompts)} prompts but {len(adapters)} adapter names; give one name per prompt")
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: list[Completion | None] = [None] * len(prompts)
    for start in range(0, len(order), batch_size):
        rows = sorted(order[start : start + batch_size], key=lambda i: adapters[i])  # as generate()
        done = _continued_batch(
            model,
            tokenizer,
            [prompts[i] for i in rows],
            [adapters[i] for i in rows],
            segments,
            sampling,
            context=context,
            stats=stats,
            generator=generator,
        )
        for i, completion in zip(rows, done):
            out[i] = completion
    heap.trim()  # the KV caches just freed (see evolora.generation.heap)
    return out  # type: ignore[return-value]


def _continued_batch(
    model: CausalLM, tokenizer: Tokenizer, prompts, adapters, segments, sampling: Sampling, *, context, stats, generator
) -> list[Completion]:
    """One batch of rows through every segment in one :class:`evolora.generation.decode.Decoder`."""
    began = time.perf_counter()
    eos_ids = end_of_turn_ids(model, tokenizer)
    device = model_device(model)
    eos = torch.tensor(sorted(eos_ids), dtype=torch.long, device=device)
    forced = [tokenizer(s.forced, add_special_tokens=False)["input_ids"] if s.forced else [] for s in segments]
    each = [segment_sampling(sampling, s) for s in segments]
    input_ids, attention = left_pad([list(p) + forced[0] for p in prompts], tokenizer.pad_token_id, device)
    decoder = Decoder(
        model,
        input_ids,
        attention,
        list(adapters),
        context=context,
        capacity=input_ids.shape[1] + sum(e.max_new_tokens for e in each) + sum(map(len, forced)) + len(segments),
    )
    ids = [list(forced[0]) for _ in prompts]
    mask = [[False] * len(forced[0]) for _ in prompts]
    truncated, kept, sampled = [False] * len(prompts), [], 0
    minimum = min_new_tokens(model)
    try:
        for k, segment in enumerate(segments):
            last = k == len(segments) - 1
            if k:
                decoder.extend(kept, new, forced[k])
                for row in range(len(prompts)):
                    ids[row] += forced[k]
                    mask[row] += [False] * len(forced[k])
            stop = StopOnText(tokenizer, segment.stop, 0).tails if segment.stop else None
            new = decoder.run(
                each[k],
                eos=eos,
                pad_id=tokenizer.pad_token_id,
                generator=generator,
                stopped=stop,
                min_new_tokens=minimum,
                compact=last,
            )
            kept = []
            for row in range(len(prompts)):
                done = completion_of(tokenizer, [], "", new[row].tolist(), eos_ids, segment.stop, segment.keep_stop)
                part = list(done.completion_ids)
                sampled += len(part)
                if not last and part and part[-1] in eos_ids:
                    part = part[:-1]  # the row goes on with the next segment's forced text
                kept.append(len(part))
                ids[row] += part
                mask[row] += [True] * len(part)
                truncated[row] = done.truncated
    finally:
        decoder.close()
    if stats is not None:
        stats.seconds += time.perf_counter() - began
        stats.tokens += sampled
    return [
        Completion(
            adapter=a,
            prompt_ids=tuple(p),
            completion_ids=tuple(i),
            text=tokenizer.decode(i, skip_special_tokens=True),
            truncated=t,
            mask=tuple(m),
        )
        for a, p, i, m, t in zip(adapters, prompts, ids, mask, truncated)
    ]
