"""Multi-segment rollouts: forced text between sampled parts, stop strings, masked log-probs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from bank_helpers import random_bank

from evolora.generation.engine import PeftEngine
from evolora.generation.rollout import chat_prompt
from evolora.generation.routed import routed
from evolora.generation.types import Sampling
from evolora.learner import Sample, completion_logprobs
from evolora.tasks.base import Segment

FORCED = "\n```python\n"


def _bank(tiny, b_std=0.5):
    model, tokenizer = tiny
    bank = random_bank(
        model, ["A0", "A1"], target_modules=("q_proj", "v_proj", "down_proj"), b_std=b_std, seed=3, tokenizer=tokenizer
    )
    return bank, tokenizer


def _prompts(tokenizer):
    return [chat_prompt(tokenizer, [{"role": "user", "content": t}]) for t in ("a problem", "another one", "x")]


def test_segments_equal_manual_generate_append_continue(tiny):
    bank, tokenizer = _bank(tiny)
    prompts, names = _prompts(tokenizer), ["A0", "A1", "A0"]
    segments = (Segment(max_new_tokens=5), Segment(forced=FORCED, max_new_tokens=6))
    torch.manual_seed(0)
    out = bank.rollout(prompts, names, Sampling(max_new_tokens=9, temperature=0.01), segments=segments)
    forced = tokenizer(FORCED, add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    for prompt, name, completion in zip(prompts, names, out):
        (first,) = bank.rollout([prompt], [name], Sampling(max_new_tokens=5, greedy=True))
        head = [t for t in first.completion_ids if t != eos]
        (second,) = bank.rollout([prompt + head + forced], [name], Sampling(max_new_tokens=6, greedy=True))
        assert completion.completion_ids == tuple(head + forced + list(second.completion_ids))
        assert completion.mask == tuple(
            [True] * len(head) + [False] * len(forced) + [True] * len(second.completion_ids)
        )
        assert FORCED in completion.text and completion.prompt_ids == tuple(prompt)


def test_masked_logprobs_equal_per_segment_forward_passes(tiny):
    """The learner's single pass over prompt | sampled | forced | sampled gives, on every sampled
    token, the log-prob of the context the rollout sampled it in; forced tokens carry no loss."""
    bank, tokenizer = _bank(tiny, b_std=0.3)
    prompts, names = _prompts(tokenizer), ["A0", "A1", "A1"]
    segments = (Segment(max_new_tokens=4), Segment(forced=FORCED, max_new_tokens=5))
    torch.manual_seed(1)
    out = bank.rollout(prompts, names, Sampling(max_new_tokens=8), segments=segments)
    samples = [Sample(c.prompt_ids, c.completion_ids, 0.0, "g", mask=c.mask) for c in out]
    with torch.no_grad(), routed(bank, names):
        logp, mask = completion_logprobs(bank.model, samples)
    for row, (sample, name) in enumerate(zip(samples, names)):
        assert mask[row, : len(sample.completion_ids)].tolist() == list(sample.mask)
        assert int(mask[row].sum()) == sample.trained_tokens < len(sample.completion_ids)
        sequence = torch.tensor([list(sample.prompt_ids) + list(sample.completion_ids)])
        with torch.no_grad(), routed(bank, [name]):
            logits = bank.model(input_ids=sequence, use_cache=False).logits[0].float()
        reference = F.log_softmax(logits[:-1], -1)
        start = len(sample.prompt_ids)
        for t, (token, sampled) in enumerate(zip(sample.completion_ids, sample.mask)):
            if sampled:  # one pass over one unpadded row
                assert torch.allclose(logp[row, t], reference[start + t - 1, token], atol=1e-4)


def test_stop_strings_cut_rows_and_drop_or_keep_the_stop_token(tiny):
    bank, tokenizer = _bank(tiny)
    prompts, names = _prompts(tokenizer), ["A0", "A1", "A0"]

    def sample(**stop):  # the same seed draws the same tokens until a row stops
        torch.manual_seed(5)
        return bank.rollout(prompts, names, Sampling(max_new_tokens=16, **stop))

    free = sample()
    # stop at the 3rd generated character of each row: every row then stops early
    stops = tuple(dict.fromkeys(c.text[2] for c in free if len(c.text) > 3))
    kept, dropped = sample(stop=stops), sample(stop=stops, keep_stop=False)
    assert stops
    for full, keep, drop in zip(free, kept, dropped):
        hits = [k for k, ch in enumerate(full.text) if ch in stops]
        if not hits:  # a row that never writes a stop string runs as before
            assert keep.completion_ids == full.completion_ids
            continue
        assert keep.text == full.text[: hits[0] + 1] and not keep.truncated
        assert drop.completion_ids == keep.completion_ids[:-1]
        assert full.completion_ids[: len(keep.completion_ids)] == keep.completion_ids


def _both(bank, tokenizer, prompts, names, segments, seed, batch_size):
    """Segments by the eager engine (one Decoder: prefill once, continue from the cache, cut tokens
    masked out) and by the PEFT engine (one PEFT ``generate`` over the whole context per segment)."""
    outs = []
    for engine in (bank.engine, PeftEngine(bank.model, tokenizer, bank)):
        torch.manual_seed(seed)
        outs.append(
            engine.generate(prompts, names, Sampling(max_new_tokens=9), segments=segments, batch_size=batch_size)
        )
    return outs


@pytest.mark.slow
def test_decoder_segments_with_cut_stops_equal_generate_per_segment(tiny):
    """One row at a time (so both draw the same noise in the same order), sampled at T = 1 and
    0.7: stop strings end rows early and keep_stop=False cuts the stop token from the cache."""
    bank, tokenizer = _bank(tiny)
    prompts, names = _prompts(tokenizer), ["A0", "A1", "A0"]
    torch.manual_seed(2)
    free = bank.rollout(prompts, names, Sampling(max_new_tokens=8))
    stops = tuple(dict.fromkeys(ch for c in free for ch in c.text[1:4]))
    segments = (
        Segment(stop=stops, max_new_tokens=8, keep_stop=False),
        Segment(forced=FORCED, stop=stops[::2], max_new_tokens=6, temperature=0.7),
        Segment(forced="print(", max_new_tokens=4, keep_stop=False),
    )
    early = 0
    for seed in range(3):
        for prompt, name in zip(prompts, names):
            (ours,), (reference,) = _both(bank, tokenizer, [prompt], [name], segments, seed, 1)
            assert (ours.completion_ids, ours.mask, ours.truncated) == (
                reference.completion_ids,
                reference.mask,
                reference.truncated,
            )
            early += sum(ours.mask) < 8 + 6 + 4
    assert stops and early  # some rows stopped early


def test_decoder_segments_equal_generate_per_segment_in_one_batch(tiny):
    """Several rows in one batch (equal prompt lengths and no EOS, so both keep the row order)."""
    bank, tokenizer = _bank(tiny)
    prompts = [chat_prompt(tokenizer, [{"role": "user", "content": t}]) for t in ("ab", "cd", "ef", "gh")]
    names = ["A0", "A1", "A1", "A0"]
    segments = (Segment(max_new_tokens=5), Segment(forced=FORCED, max_new_tokens=4, temperature=0.7))
    bank.model.generation_config.min_new_tokens = 100  # no EOS: every row runs every token
    try:
        ours, reference = _both(bank, tokenizer, prompts, names, segments, 5, 8)
    finally:
        bank.model.generation_config.min_new_tokens = None
    for got, want in zip(ours, reference):
        assert (got.completion_ids, got.mask) == (want.completion_ids, want.mask)
    assert len({c.completion_ids for c in ours}) == 4
