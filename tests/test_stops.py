"""Stop strings and stop patterns: where a row ends, and what of it is kept."""

from __future__ import annotations

import re

import pytest
import torch

from evolora.generation.stops import PATTERN_WINDOW, StopOnText, stop_cut
from evolora.tasks import make_task
from evolora.tasks.gsm.task import ANSWER_LINE


class CharTokenizer:
    """One token per character (id = code point): decoded text is exact, so cuts can be checked by eye."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)

    def batch_decode(self, rows, skip_special_tokens=True):
        return [self.decode(row) for row in rows]


def ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_a_pattern_stop_cuts_after_the_first_finished_answer_line():
    tok = CharTokenizer()
    text = "16 - 3 = 13\n#### 13\n#### 14\n#### 15\n"
    keep = stop_cut(tok, ids(text), (ANSWER_LINE,), keep=True)
    assert tok.decode(ids(text)[:keep]) == "16 - 3 = 13\n#### 13\n"
    drop = stop_cut(tok, ids(text), (ANSWER_LINE,), keep=False)
    assert tok.decode(ids(text)[:drop]) == "16 - 3 = 13\n"
    # an unfinished answer line, or a marker without a number, does not stop
    assert stop_cut(tok, ids("so #### 13"), (ANSWER_LINE,), keep=True) is None
    assert stop_cut(tok, ids("####\nno number\n"), (ANSWER_LINE,), keep=True) is None
    # strings and patterns mix: the earliest stop wins
    assert stop_cut(tok, ids("a; #### 1\n"), (";", ANSWER_LINE), keep=True) == 2


def test_stop_on_text_reads_a_wider_window_for_patterns():
    tok = CharTokenizer()
    assert StopOnText(tok, ("\n",), 0).window == 8
    stopper = StopOnText(tok, (re.compile(r"#### \d+\n"),), 0)
    assert stopper.window == PATTERN_WINDOW
    rows = torch.tensor([ids("xx#### 1234\n"), ids("xx#### 1234 "), ids("#### 99\nxxxx")])
    assert stopper.tails(rows).tolist() == [True, False, True]


def test_gsm_answers_stop_at_the_answer_line_and_grade_the_same():
    task = make_task("gsm")
    assert task.answer_stop == (ANSWER_LINE,)
    assert make_task("arith").answer_stop == ()
    answer = "3 boxes of 10 eggs: 3 * 10 = 30\n#### 30\n"
    assert task.grade(answer, 30.0).label == "correct"
    assert task.grade(answer + "#### 31\n#### 32", 30.0).label == "wrong"  # what the stop prevents


# -- the flagged host check against the check of every live row -------------------------------------

STREAM_TEXTS = (
    "Natalia sold 48 clips in April.\nShe sold half as many in May.\n\nQuestion: how many?\n#### 72\n",
    "```python\nprint(48 + 24)\n```\nThe answer is 72.\n\n",
    "Résumé: 3 → 9 ✓\nQuestion:\n\n#### 1,234\n",
)


def _streams(tokenizer, rows: int, steps: int) -> torch.Tensor:
    """(rows, steps) token streams: slices of the texts above, as the tokenizer splits them, with random
    tokens spliced in (a recorded decode's mix of prose, line breaks and noise)."""
    g = torch.Generator().manual_seed(0)
    pieces = [tokenizer.encode(t, add_special_tokens=False) for t in STREAM_TEXTS]
    out = torch.randint(3, len(tokenizer), (rows, steps), generator=g)
    for row in range(rows):
        column = int(torch.randint(0, 6, (1,), generator=g))
        while column < steps:
            piece = pieces[int(torch.randint(len(pieces), (1,), generator=g))]
            start = int(torch.randint(len(piece) - 4, (1,), generator=g))
            take = piece[start : start + min(steps - column, int(torch.randint(4, 12, (1,), generator=g)))]
            out[row, column : column + len(take)] = torch.tensor(take)
            column += len(take) + int(torch.randint(0, 4, (1,), generator=g))
    return out


def _every_row_ends(out: torch.Tensor, eos: set[int], tails, check_every: int) -> tuple[list, torch.Tensor]:
    """The graph engine's host check as it was: per check, EOS over every column, then every live
    row's tail decoded at every step since the last check. Returns (ends, the padded tokens)."""
    out, total, steps = out.clone(), out.shape[0], out.shape[1]
    ends, checked = [None] * total, 0
    marks = [s for s in range(1, steps + 1) if s == 1 or s % check_every == 0 or s == steps]
    for s in marks:
        hits = torch.isin(out[:, :s], torch.tensor(sorted(eos)))
        for i in range(total):
            if ends[i] is None and hits[i].any():
                ends[i] = int(hits[i].int().argmax())
        for t in range(checked + 1, s + 1):
            live = [i for i in range(total) if ends[i] is None or ends[i] >= t - 1]
            if not live:
                break
            hit = tails(out[torch.tensor(live), :t], torch.tensor(live), t)
            for i, h in zip(live, hit.tolist()):
                if h and (ends[i] is None or ends[i] > t - 1):
                    ends[i] = t - 1
                    out[i, t:] = 0
        checked = s
    return ends, out


def _host_check_ends(out: torch.Tensor, eos: set[int], stopped, check_every: int) -> tuple[list, torch.Tensor]:
    """:class:`HostCheck` over the same tokens, as the graph loop calls it (a buffer row per stream)."""
    from types import SimpleNamespace

    from evolora.generation.host_check import HostCheck

    total, steps = out.shape
    b = SimpleNamespace(
        out=torch.cat([out, torch.zeros(1, steps, dtype=torch.long)]),
        rows=torch.arange(total),
        done=torch.zeros(total, dtype=torch.bool),
    )
    host, checked = HostCheck(total, steps, eos, stopped), 0
    for s in [s for s in range(1, steps + 1) if s == 1 or s % check_every == 0 or s == steps]:
        host.check(b, total, checked, s, pad_id=0)
        checked = s
    return host.ends, b.out[:total]


def _tokenizer(name: str):
    if name == "smollm2":
        from transformers import AutoTokenizer

        from evolora.model import resolve_model

        try:
            return AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
        except (ImportError, ValueError, OSError) as error:
            pytest.skip(f"the embedded SmolLM2 is not installed here ({error})")
    from evolora.model.tiny import tiny_tokenizer

    return tiny_tokenizer()


@pytest.mark.parametrize(
    "name",
    ["tiny", pytest.param("smollm2", marks=pytest.mark.slow)],
)
def test_the_flagged_host_check_ends_the_rows_the_full_check_ends(name):
    from evolora.generation.kernels.stop_mask import FlaggedStop, stop_mask

    tokenizer = _tokenizer(name)
    out = _streams(tokenizer, 48, 40)
    eos = {int(out[5, 30]), int(out[17, 12])}  # two tokens that end some rows early
    for stops in (("\n",), ("\n\n", "####"), ("Question:", "```", "72.")):
        decoded = []
        tails = StopOnText(tokenizer, stops, 0).tails
        counting = lambda generated, rows, t: decoded.append(len(rows)) or tails(generated)  # noqa: E731
        want_ends, want_out = _every_row_ends(out, eos, counting, 8)
        every = sum(decoded)
        decoded.clear()
        mask = stop_mask(tokenizer, stops, size=len(tokenizer))
        ends, padded = _host_check_ends(out, eos, FlaggedStop(counting, mask), 8)
        assert ends == want_ends and torch.equal(padded, want_out), stops
        assert sum(e is not None for e in want_ends) >= 10  # the stops and EOS do end rows
        assert sum(decoded) < 0.5 * every  # fewer rows decoded
        unflagged, _ = _host_check_ends(out, eos, tails, 8)  # a plain check: every live row, as before
        assert unflagged == want_ends


def test_a_flagged_stop_keeps_its_mask_when_shifted_and_refuses_a_bad_one():
    from evolora.generation.graph import shifted
    from evolora.generation.kernels.stop_mask import FlaggedStop, flagged_rows

    seen = []
    stop = FlaggedStop(lambda generated, rows, t: seen.append(rows.tolist()) or rows > 5, torch.tensor([False, True]))
    moved = shifted(stop, 4)
    assert isinstance(moved, FlaggedStop) and moved.on("cpu") is stop.mask
    assert moved(torch.zeros(2, 1), torch.tensor([0, 3]), 1).tolist() == [False, True] and seen == [[4, 7]]
    plain = shifted(lambda generated, rows, t: rows, 10)
    assert plain(None, torch.tensor([1]), 1).tolist() == [11]
    tokens, done = torch.tensor([1, 0, 1, 1]), torch.tensor([False, False, True, False])
    assert flagged_rows(stop, tokens, done).tolist() == [0, 3]  # flagged and not done
    assert flagged_rows(lambda *a: None, tokens, done).tolist() == [0, 1, 3]  # no mask: every live row
    with pytest.raises(ValueError, match=r"\(V,\) bool"):
        FlaggedStop(stop, torch.ones(3, 2, dtype=torch.bool))
