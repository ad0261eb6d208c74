"""Grounding rules: a gsm proposal counts only when its program plausibly answers its own text.

The sandbox proves that a program runs and prints a number; nothing there ties the number to
the problem. These checks compare the problem's stated quantities with the program's literals
before any reward is given (each failure is its own verdict reason in ``matches.jsonl``):

    several_questions / no_question  the problem asks exactly one question ("?")
    no_quantity / one_quantity       the problem states at least two numbers (digits or words: a word
                                     problem combines quantities)
    unused_quantity                  every number stated in the problem (but 0 and 1, often implicit:
                                     "week 1") is a literal of the program (a percentage p may appear
                                     as p or p / 100)
    unexplained_constant             every literal of the program is stated in the problem, written
                                     as a number word ("twice", "dozen"), in :data:`ALLOWED_CONSTANTS`,
                                     or a unit constant whose cue the text has (:data:`UNIT_CONSTANTS`)
    copied_answer                    the printed answer is not just a number copied from the text
                                     (a percentage's value may be the answer: "20% off $25" -> 20)
    fractional_count                 a "how many" question has a whole, positive answer

They are necessary, not sufficient: a program that uses every number in the wrong way passes
(``feet * feet``); the agreement check of :mod:`evolora.tasks.gsm_agreement` is the second gate.
Source: PopuLoRA (arXiv 2605.16727) §2 step 3 (verifiable proposals); the failure mode is the
one R-Zero (arXiv 2508.05004) and Absolute Zero (arXiv 2505.03335) guard against; the rules
are evolora's own.
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

from evolora.parsing import PARSE_ERRORS

ALLOWED_CONSTANTS: frozenset[Fraction] = frozenset(Fraction(x) for x in (0, 1, 2, "0.5"))
"""Literals any program may use without the problem stating them: nothing, one, halves and pairs."""

UNIT_CONSTANTS: dict[Fraction, tuple[str, ...]] = {
    Fraction(value): cues
    for value, cues in {
        3: ("triple", "third", "triangle", "thrice"),
        4: ("quarter", "leg", "wheel", "side", "square", "season"),
        7: ("week",),
        10: ("percent", "%", "decade", "dime"),
        12: ("dozen", "month", "year", "inch", "foot", "feet"),
        24: ("day", "hour"),
        52: ("week",),
        60: ("hour", "minute", "second"),
        365: ("year",),
        100: ("percent", "%", "cent", "century", "meter", "metre"),
        1000: ("thousand", "kilo", "gram", "liter", "litre"),
        "0.25": ("quarter", "percent", "%"),
        "0.1": ("percent", "%", "dime"),
        "0.01": ("percent", "%", "cent"),
        "0.05": ("nickel", "percent", "%"),
    }.items()
}
"""Unit constants a program may use when the problem has one of their cue words (a substring of
its lower-cased text): 60 needs an hour, minute or second; 100 a percentage, cents or meters."""

NUMBER_WORDS: dict[str, Fraction] = {
    word: Fraction(value)
    for word, value in {
        "one": 1,
        "two": 2,
        "three": 3,
        "four": 4,
        "five": 5,
        "six": 6,
        "seven": 7,
        "eight": 8,
        "nine": 9,
        "ten": 10,
        "eleven": 11,
        "twelve": 12,
        "thirteen": 13,
        "fourteen": 14,
        "fifteen": 15,
        "sixteen": 16,
        "seventeen": 17,
        "eighteen": 18,
        "nineteen": 19,
        "twenty": 20,
        "thirty": 30,
        "forty": 40,
        "fifty": 50,
        "sixty": 60,
        "seventy": 70,
        "eighty": 80,
        "ninety": 90,
        "hundred": 100,
        "thousand": 1000,
        "dozen": 12,
        "twice": 2,
        "double": 2,
        "triple": 3,
        "thrice": 3,
        "half": 2,
        "halves": 2,
        "third": 3,
        "thirds": 3,
        "quarter": 4,
        "quarters": 4,
        "fifth": 5,
        "fifths": 5,
        "sixth": 6,
        "sixths": 6,
        "eighth": 8,
        "eighths": 8,
        "tenth": 10,
        "tenths": 10,
    }.items()
}
"""Words that explain a program literal (``half`` explains the 2 of ``x / 2``); they are not
required to appear in the program, since their value is often implicit."""

RULES = ("one_question", "quantities", "constants", "copied_answer", "whole_count")
"""The rule names of ``task.params.grounding`` (all on by default)."""

_NUMBER = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?|(?<![\w.,])\d+(?:\.\d+)?(?!\d|,\d{3})")
_PERCENT = re.compile(r"\s*(?:%|percent\b)", re.IGNORECASE)
_WORD = re.compile(r"[a-z]+")
_HOW_MANY = re.compile(r"\bhow\s+many\b", re.IGNORECASE)


def stated_quantities(problem: str) -> list[tuple[Fraction, bool]]:
    """The numbers written with digits in ``problem``, in order, each with whether it is a percentage.

    ``$1,250.50`` reads 1250.5; ``20%`` and ``20 percent`` read (20, True).

    >>> [(float(v), p) for v, p in stated_quantities("A $1,200 TV is 15% off; 3.5 hours")]
    [(1200.0, False), (15.0, True), (3.5, False)]
    """
    found = []
    for match in _NUMBER.finditer(problem):
        value = Fraction(match.group(0).replace(",", ""))
        found.append((value, bool(_PERCENT.match(problem, match.end()))))
    return found


def program_literals(program: str) -> list[Fraction]:
    """Every int or float literal of ``program`` (booleans excluded), as exact fractions.

    Raises:
        SyntaxError, ValueError, RecursionError, MemoryError: ``program`` does not parse
            (:data:`evolora.parsing.PARSE_ERRORS`).
    """
    tree = ast.parse(program)
    return [
        Fraction(str(node.value))
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float)
    ]


def grounding_reasons(
    problem: str, program: str, answer: float | int | None, rules: tuple[str, ...] = RULES
) -> list[str]:
    """Every grounding rule the proposal breaks, in the order of :data:`RULES`; [] when it passes.

    Args:
        problem: the word problem; program: its Python program; answer: the number it printed
            (the sandbox's verdict answer), or None.
        rules: the subset of :data:`RULES` to check.

    Returns:
        Reason strings (``several_questions``, ``no_question``, ``no_quantity``, ``one_quantity``,
        ``unused_quantity``, ``unexplained_constant``, ``copied_answer``, ``fractional_count``,
        ``parse``).
    """
    reasons = []
    if "one_question" in rules:
        questions = problem.count("?")
        if questions != 1:
            reasons.append("no_question" if questions == 0 else "several_questions")
    try:
        literals = program_literals(program)
    except PARSE_ERRORS:
        return reasons + ["parse"]
    stated = stated_quantities(problem)
    words = [NUMBER_WORDS[w] for w in _WORD.findall(problem.lower()) if w in NUMBER_WORDS]
    if "quantities" in rules:
        reasons += _quantity_reasons(stated, literals, len(words))
    if "constants" in rules and _unexplained(literals, stated, set(words), problem.lower()):
        reasons.append("unexplained_constant")
    if (
        "copied_answer" in rules
        and answer is not None
        and any(_close(Fraction(str(answer)), v) for v, percent in stated if not percent)
    ):
        reasons.append("copied_answer")
    if "whole_count" in rules and answer is not None and _HOW_MANY.search(problem):
        value = Fraction(str(answer))
        if value.denominator != 1 or value <= 0:
            reasons.append("fractional_count")
    return reasons


def _quantity_reasons(stated: list[tuple[Fraction, bool]], literals: list[Fraction], words: int) -> list[str]:
    if not stated:
        return ["no_quantity"]
    if len(stated) + words < 2:
        return ["one_quantity"]
    unused = [
        v
        for v, percent in stated
        if v not in (0, 1)  # "week 1", "1 apple": often implicit
        and not any(_close(v, c) or (percent and _close(v / 100, c)) for c in literals)
    ]
    return ["unused_quantity"] if unused else []


def _unexplained(
    literals: list[Fraction], stated: list[tuple[Fraction, bool]], words: set[Fraction], text: str
) -> list[Fraction]:
    units = {value for value, cues in UNIT_CONSTANTS.items() if any(cue in text for cue in cues)}
    known = {v for v, _ in stated} | {v / 100 for v, percent in stated if percent} | words | ALLOWED_CONSTANTS | units
    return [c for c in literals if not any(_close(c, k) for k in known)]


def _close(a: Fraction, b: Fraction) -> bool:
    """Equal up to float noise (a literal 0.1 against a stated 0.10)."""
    return abs(a - b) <= Fraction(1, 10**9) * max(1, abs(a), abs(b))
