"""The preallocated-cache engine equals ``transformers``' ``generate`` token for token.

Both run through the same routed hooks (mixed adapters and base rows), so only the engine
differs: DynamicCache re-concatenation vs in-place buffers, a batch that shrinks as rows end,
prefill shared by rows with the same prompt and adapter, and the sampling draw.
"""

from __future__ import annotations

import pytest
import torch
from bank_helpers import random_bank

from evolora.generation.decode import BufferLayer, decode, skinny_linears
from evolora.generation.rollout import chat_prompt, left_pad
from evolora.generation.routed import BASE, routed
from evolora.generation.types import Sampling

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
NAMES = ["A0", "A1", BASE, "A1", "A0", "A2"]


@pytest.fixture
def setup(tiny):
    model, tokenizer = tiny
    bank = random_bank(model, ["A0", "A1", "A2"], target_modules=MODULES, b_std=0.3)
    texts = ("hi", "what is 2+2?", "x", "what is 2+2?", "hi", "a longer prompt here")
    prompts = [chat_prompt(tokenizer, [{"role": "user", "content": t}]) for t in texts]
    ids, attention = left_pad(prompts, tokenizer.pad_token_id)
    return bank, tokenizer, ids, attention


def _hf(bank, ids, attention, eos, pad, tokens, **sampling):
    with torch.no_grad(), routed(bank, NAMES):
        out = bank.model.generate(
            input_ids=ids,
            attention_mask=attention,
            max_new_tokens=tokens,
            pad_token_id=pad,
            eos_token_id=sorted(eos),
            **sampling,
        )
    return out[:, ids.shape[1] :]


def _ours(bank, ids, attention, eos, pad, tokens, **sampling):
    with torch.no_grad():
        return decode(
            bank.model,
            ids,
            attention,
            NAMES,
            Sampling(max_new_tokens=tokens, **sampling),
            eos_ids=eos,
            pad_id=pad,
            context=lambda names: routed(bank, names),
        )


def _eos_that_ends_some_rows(reference: torch.Tensor) -> set[int]:
    """A token the free run writes in some rows but not all, at different steps: as EOS it
    ends rows early at different times (the batch shrinks, the others go on)."""
    counts = torch.bincount(reference[:, 2:].flatten(), minlength=128)
    for token in counts.argsort(descending=True).tolist():
        rows = [(row == token).any().item() for row in reference[:, 2:]]
        if 0 < sum(rows) < len(rows) - 1:
            return {token}
    raise AssertionError("no token ends only some rows")


def test_greedy_equals_generate_with_rows_ending_early(setup):
    bank, tokenizer, ids, attention = setup
    pad = tokenizer.pad_token_id
    free = _hf(bank, ids, attention, {tokenizer.eos_token_id}, pad, 16, do_sample=False)
    eos = _eos_that_ends_some_rows(free)
    ref = _hf(bank, ids, attention, eos, pad, 16, do_sample=False)
    ours = _ours(bank, ids, attention, eos, pad, 16, greedy=True, temperature=1.0, top_p=1.0)
    assert (ref == pad).any() and torch.equal(ours, ref[:, : ours.shape[1]])
    assert ours.shape[1] == ref.shape[1]


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_sampling_equals_generate_seed_for_seed(setup, temperature, top_p):
    """The same global seed draws the same tokens, also after rows ended (noise for every row)."""
    bank, tokenizer, ids, attention = setup
    pad = tokenizer.pad_token_id
    torch.manual_seed(3)
    free = _hf(
        bank,
        ids,
        attention,
        {tokenizer.eos_token_id},
        pad,
        14,
        do_sample=True,
        temperature=temperature,
        top_p=top_p,
        top_k=0,
    )
    eos = _eos_that_ends_some_rows(free)
    torch.manual_seed(4)
    ref = _hf(bank, ids, attention, eos, pad, 14, do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
    torch.manual_seed(4)
    ours = _ours(bank, ids, attention, eos, pad, 14, greedy=False, temperature=temperature, top_p=top_p)
    assert torch.equal(ours, ref)


def test_duplicate_prompts_share_prefill_and_match_alone(setup):
    """Rows 1 and 3 (same prompt, A1) and 0 and 4 (same prompt, A0): one prefill each, same greedy tokens."""
    bank, tokenizer, ids, attention = setup
    eos, pad = {tokenizer.eos_token_id}, tokenizer.pad_token_id
    ours = _ours(bank, ids, attention, eos, pad, 10, greedy=True, temperature=1.0, top_p=1.0)
    assert torch.equal(ours[1], ours[3]) and torch.equal(ours[0], ours[4])
    calls = []
    handle = bank.model.get_base_model().model.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(kwargs["input_ids"].shape), with_kwargs=True
    )
    try:
        _ours(bank, ids, attention, eos, pad, 2, greedy=True, temperature=1.0, top_p=1.0)
    finally:
        handle.remove()
    assert calls[0][0] == 4  # six rows: two (prompt, adapter) pairs twice
    for row in (0, 1, 5):
        with torch.no_grad():
            single = decode(
                bank.model,
                ids[row : row + 1],
                attention[row : row + 1],
                [NAMES[row]],
                Sampling(max_new_tokens=10, greedy=True),
                eos_ids=eos,
                pad_id=pad,
                context=lambda names: routed(bank, names),
            )
        assert torch.equal(single[0], ours[row, : single.shape[1]])


def test_buffer_layer_writes_in_place_and_refuses_overflow():
    layer = BufferLayer(capacity=5)
    k = torch.randn(2, 3, 4, 8)
    keys, values = layer.update(k, k + 1)
    assert keys.shape == (2, 3, 4, 8) and torch.equal(keys, k) and torch.equal(values, k + 1)
    storage = keys.data_ptr()
    keys, _ = layer.update(k[:, :, :1], k[:, :, :1])
    assert keys.shape[2] == 5 and keys.data_ptr() == storage and layer.get_seq_length() == 5
    with pytest.raises(RuntimeError, match="holds 5 positions"):
        layer.update(k[:, :, :1], k[:, :, :1])


def test_skinny_linears_equal_f_linear_and_restore_forward(tiny):
    model, _ = tiny
    head = model.get_output_embeddings()
    x = torch.randn(3, 1, head.in_features, generator=torch.Generator().manual_seed(0))
    wide = torch.randn(2, 20, head.in_features, generator=torch.Generator().manual_seed(1))  # > SKINNY_ROWS rows
    with skinny_linears(model):
        assert "forward" in head.__dict__ and "forward" not in model.model.layers[0].mlp.down_proj.__dict__
        got, got_wide = head(x), head(wide)
    assert "forward" not in head.__dict__
    assert got.shape == (3, 1, head.out_features) and got.is_contiguous()
    assert torch.allclose(got, torch.nn.functional.linear(x, head.weight), atol=1e-6, rtol=1e-6)
    assert torch.equal(got_wide, torch.nn.functional.linear(wide, head.weight))


def test_skinny_linears_give_f_linear_a_contiguous_view_of_many_rows(tiny, monkeypatch):
    """A prefill's last positions (B, 1, d), a strided view of (B, T, d), reach F.linear contiguous
    (a strided bf16 LM-head input costs the head over all T positions), with the same values."""
    model, _ = tiny
    head = model.get_output_embeddings()
    hidden = torch.randn(20, 7, head.in_features, generator=torch.Generator().manual_seed(2))
    last = hidden[:, -1:, :]  # > SKINNY_ROWS rows, not contiguous
    seen = []
    linear = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda x, *a: seen.append(x.is_contiguous()) or linear(x, *a))
    with skinny_linears(model):
        got = head(last)
    assert seen == [True]
    assert torch.equal(got, linear(last.contiguous(), head.weight))
