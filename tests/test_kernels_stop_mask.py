"""The stop mask: exact marks on the character tokenizer and a multi-character one, and on recorded
random token streams (character, multi-character and byte-level BPE tokenizers) the flagged check
ends every row where checking every row at every step does."""

from __future__ import annotations

import re

import pytest
import torch

from evolora.generation.kernels.stop_mask import could_end, flagged_stop_ends, stop_flags, stop_mask
from evolora.generation.stops import StopOnText
from evolora.model.tiny import tiny_tokenizer


def _word_tokenizer(words):
    """A tokenizer whose tokens are ``words`` (multi-character), decoded by concatenation."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<pad>", "</s>", *words])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split(" ", behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", clean_up_tokenization_spaces=False
    )


def _byte_tokenizer():
    """A byte-level BPE (GPT-2's scheme) trained in memory on text with multi-byte characters."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<pad>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    text = ["Answer: 12 €\n\n#### 12\n", "café au lait, naïve résumé\n", "x = 3 → y = 9 ✓\n\nDone."] * 20
    backend.train_from_iterator(text, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>")


WORDS = ["ab", "b\n", "\n\n", "\nx", "x", "cd", "\n", "a", "b", " ", "#", "##", "## 4", "4"]


def test_could_end_is_hold_or_start_with_a_proper_suffix():
    assert could_end("b\nc", "\n") and could_end("\nx", "b\n") and could_end("xab\nz", "ab\n")
    assert not could_end("b\n", "\n\n") and not could_end("xa", "ab") and not could_end("", "ab")


def test_char_tokenizer_marks_exactly_the_last_character():
    tokenizer = tiny_tokenizer()
    ids = lambda s: tokenizer.convert_tokens_to_ids(list(s))  # noqa: E731
    mask = stop_mask(tokenizer, ("\n",), size=len(tokenizer) + 3)
    assert torch.nonzero(mask).flatten().tolist() == ids("\n") + list(range(len(tokenizer), len(tokenizer) + 3))
    assert torch.nonzero(stop_mask(tokenizer, ("ab", "cd"))).flatten().tolist() == sorted(ids("bd"))
    assert not stop_mask(tokenizer, ()).any()
    assert stop_mask(tokenizer, (re.compile(r"\d+"),)).all()  # a pattern: every row checked
    with pytest.raises(ValueError, match="empty"):
        stop_mask(tokenizer, ("",))


def test_multi_character_tokens_are_marked_when_they_can_complete_the_stop():
    tokenizer = _word_tokenizer(WORDS)
    marked = {
        tokenizer.convert_ids_to_tokens(i) for i in torch.nonzero(stop_mask(tokenizer, ("\n\n",))).flatten().tolist()
    }
    assert marked == {"\n\n", "\nx", "\n"}  # "b\n" starts a stop but cannot end one
    marked = {
        tokenizer.convert_ids_to_tokens(i) for i in torch.nonzero(stop_mask(tokenizer, ("## 4",))).flatten().tolist()
    }
    assert marked == {"## 4", "4"}  # "4" after "## "; "#" cannot end it, " " cannot, "##" cannot


def _ends_every_row_every_step(tokenizer, stops, out):
    """The unflagged reference: per row, the first t whose tail (``StopOnText``) holds a stop, as t − 1."""
    tails = StopOnText(tokenizer, stops, 0).tails
    ends = []
    for row in out:
        hit = [t for t in range(1, out.shape[1] + 1) if tails(row[None, :t])[0]]
        ends.append(hit[0] - 1 if hit else None)
    return ends


def _pool(tokenizer, name):
    """Token ids the streams draw from: the stops' pieces, split as each tokenizer splits them (for the
    byte-level one, also the single bytes of multi-byte characters), and some others."""
    if name == "bytes":
        byte_ids = tokenizer.convert_tokens_to_ids(["â", "Ĥ", "¬", "Ã", "©"])  # the bytes of € and é
        return sorted(set(tokenizer.encode("é r x € ✓\n\nz é", add_special_tokens=False) + byte_ids))
    text = "ab\n\nx a" if name == "char" else None
    if text is not None:
        return tokenizer.convert_tokens_to_ids(list(text))
    return tokenizer.convert_tokens_to_ids(WORDS)


@pytest.mark.parametrize(
    "name, stops", [("char", ("\n", "ab")), ("words", ("\n\n", "## 4")), ("bytes", ("\n\n", "€", "é r", "✓"))]
)
def test_flagged_check_ends_rows_where_the_full_check_does(name, stops):
    tokenizer = {"char": tiny_tokenizer, "words": lambda: _word_tokenizer(WORDS), "bytes": _byte_tokenizer}[name]()
    g = torch.Generator().manual_seed(0)
    pool = torch.tensor(_pool(tokenizer, name))
    out = pool[torch.randint(len(pool), (48, 40), generator=g)]
    out[:, :20] = torch.randint(2, len(tokenizer), (48, 20), generator=g)  # any token, for the first half
    mask = stop_mask(tokenizer, stops)
    flags = stop_flags(mask, out)
    assert 0 < flags.float().mean().item() < 0.6  # something is skipped, something is checked
    ends, decoded = [None] * len(out), []
    tails = StopOnText(tokenizer, stops, 0).tails
    counting = lambda generated, index, t: decoded.append(len(index)) or tails(generated)  # noqa: E731
    for checked, steps in ((0, 1), (1, 8), (8, 16), (16, 24), (24, 32), (32, 40)):  # a check every 8 steps
        flagged_stop_ends(out, flags, counting, checked, steps, ends)
    want = _ends_every_row_every_step(tokenizer, stops, out)
    assert ends == want
    assert sum(e is not None for e in want) >= 8  # the streams do hit the stops
    only_whole = torch.tensor([any(s in tokenizer.decode([i]) for s in stops) for i in range(len(tokenizer))])
    naive = [None] * len(out)
    flagged_stop_ends(out, only_whole[out], tails, 0, 40, naive)
    assert naive != want  # marking only the tokens that hold a whole stop would miss rows
    assert sum(decoded) < 0.6 * sum(min(40, (e if e is not None else 40) + 1) for e in want)
