"""Multi-segment rollouts: generate, append forced text, continue.

A small model that cannot hold a whole format in one free-form answer (the ``gsm``
teacher's problem *and* program) is given the structure: it writes the problem, the
rollout appends a forced code fence, the model writes the program and stops at the
closing fence. Every row is one sequence

    prompt | segment 1 (sampled) | forced text | segment 2 (sampled) | ...

and its :class:`evolora.rollout.Completion` marks which completion tokens were sampled
(``mask``). The learner trains on exactly those tokens, with log-probs conditioned on the
same context they were sampled in (forced tokens included), so one forward pass over the
whole sequence gives the same log-probs as the rollout (tested).

Source: PopuLoRA (arXiv 2605.16727) §2 step 2 (the teacher's proposal, here structured).
"""

from __future__ import annotations

from evolora.rollout import Completion, RolloutStats, _eos_ids, generate
from evolora.tasks.base import Segment


def generate_segments(
    model, tokenizer, prompts: list[list[int]], adapters: list[str], segments: tuple[Segment, ...], *,
    max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0, batch_size: int = 16,
    stats: RolloutStats | None = None, bank=None,
) -> list[Completion]:
    """Generate every row through the same sequence of segments.

    Args:
        prompts, adapters: N prompts as token ids (forced prefix included), N adapter names.
        segments: the structure (>= 1). Segment k's ``forced`` text is tokenized on its own
            and appended before it is generated. An EOS ends a segment, and the row only in
            the last segment; it is dropped from the middle of a row.
        max_new_tokens: token limit of a segment without its own.
        temperature, top_p, batch_size, stats, bank: as :func:`evolora.rollout.generate`; a
            segment's own ``temperature`` replaces ``temperature``.

    Returns:
        N completions: ``completion_ids`` hold every sampled and forced token in order,
        ``mask`` is True exactly on the sampled ones, ``truncated`` is the last segment's.

    Raises:
        ValueError: no segments, or ``prompts`` and ``adapters`` differ in length (checked by
            :func:`evolora.rollout.generate`).
    """
    if not segments:
        raise ValueError("generate_segments needs at least one Segment; use rollout.generate for free-form answers")
    eos = _eos_ids(model, tokenizer)
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
            model, tokenizer, [list(p) + i for p, i in zip(prompts, ids)], adapters,
            max_new_tokens=segment.max_new_tokens or max_new_tokens, top_p=top_p,
            temperature=segment.temperature if segment.temperature is not None else temperature,
            batch_size=batch_size, stats=stats, bank=bank, stop=segment.stop, keep_stop=segment.keep_stop,
        )
        for row, output in enumerate(outputs):
            new = list(output.completion_ids)
            if not last and new and new[-1] in eos:
                new = new[:-1]  # the row goes on with the next segment's forced text
            ids[row] += new
            mask[row] += [True] * len(new)
            truncated[row] = output.truncated
    return [
        Completion(adapter=adapter, prompt_ids=tuple(prompt), completion_ids=tuple(row_ids),
                   text=tokenizer.decode(row_ids, skip_special_tokens=True), truncated=trunc,
                   mask=tuple(row_mask))
        for adapter, prompt, row_ids, row_mask, trunc in zip(adapters, prompts, ids, mask, truncated)
    ]
