"""Stop strings and stop patterns: where a row ends, and what of it is kept."""

from __future__ import annotations

import re

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
