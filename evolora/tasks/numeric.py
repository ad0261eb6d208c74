"""Parse and compare numeric answers written by models and programs.

Pure functions, no I/O. ``parse_number`` reads a string that *is* a number (as a program
prints it, or as it follows "####"); ``final_number`` finds a student's final answer in
free text; ``numbers_equal`` compares with tolerances.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"""
    (?<![\w.])                       # not inside a word or after a decimal point
    -?                               # sign
    (?:\d{1,3}(?:,\d{3})+|\d+)       # integer part, optionally with thousands commas
    (?:\.\d+)?                       # decimals
    (?:[eE][-+]?\d+)?                # exponent
    (?:/\d+(?![\d.]))?               # a simple fraction 3/4
    |(?<![\w.])-?\.\d+               # .5
"""
_NUMBER_RE = re.compile(_NUMBER, re.VERBOSE)
_LATEX_FRAC = re.compile(r"^(-?)\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}$")
_MARKER = re.compile(r"####\s*(.*)")
_BOXED = re.compile(r"\\boxed\s*\{")
_ANSWER_IS = re.compile(
    r"(?:final answer|answer)\s*(?:is|=|:)\s*(?:\*\*)?\s*(?:\\\(|\$)?\s*(.*)", re.IGNORECASE)


def parse_number(text: str) -> float | None:
    """Parse a string that is a single number; None otherwise (also for inf and nan).

    Accepts thousands separators, a currency sign, a trailing percent sign or period
    (the number as written: "50%" -> 50.0), simple fractions and LaTeX ``\\frac``,
    scientific notation, Unicode minus and surrounding Markdown bold.

    >>> [parse_number(s) for s in ["1,234", "$5.50", "3/4", "-2", "1e3", "50%", " 7. "]]
    [1234.0, 5.5, 0.75, -2.0, 1000.0, 50.0, 7.0]
    >>> parse_number("\\\\frac{1}{2}"), parse_number("−3"), parse_number("**12**")
    (0.5, -3.0, 12.0)
    >>> [parse_number(s) for s in ["", "abc", "1 2", "nan", "inf", "1/0", "12 apples"]]
    [None, None, None, None, None, None, None]
    """
    s = text.strip().replace("\u2212", "-").strip("*").strip()
    s = s.rstrip(".").rstrip("%").strip()
    negative = s.startswith("-")
    if negative:
        s = s[1:].strip()
    s = s.lstrip("$").strip()
    if s.startswith("-"):  # "$-5"
        negative, s = not negative, s[1:]
    latex = _LATEX_FRAC.match(s)
    if latex:
        num, den = parse_number(latex.group(2)), parse_number(latex.group(3))
        if num is None or den is None or den == 0:
            return None
        value = num / den
    elif re.fullmatch(r"\d+/\d+", s):
        num, den = (int(part) for part in s.split("/"))
        if den == 0:
            return None
        value = num / den
    elif re.fullmatch(r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?", s):
        try:
            value = float(s.replace(",", ""))
        except (ValueError, OverflowError):
            return None
    else:
        return None
    if not math.isfinite(value):
        return None
    return -value if negative else value


def _first_number(text: str) -> float | None:
    match = _NUMBER_RE.search(text.replace("\u2212", "-").replace("$", ""))
    return parse_number(match.group(0)) if match else None


def _last_number(text: str) -> float | None:
    matches = _NUMBER_RE.findall(text.replace("\u2212", "-").replace("$", ""))
    return parse_number(matches[-1]) if matches else None


def _boxed_contents(text: str) -> list[str]:
    out = []
    for match in _BOXED.finditer(text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                out.append(text[start:i])
                break
    return out


def marked_number(completion: str) -> float | None:
    """The number after the last "####" marker, or None when there is none.

    >>> marked_number("so 9 * 2 = 18\\n#### 18"), marked_number("18")
    (18.0, None)
    """
    markers = _MARKER.findall(completion)
    return _first_number(markers[-1]) if markers else None


def final_number(completion: str) -> float | None:
    """A student's final answer: the first number after the last "#### ", else in the
    last ``\\boxed{}``, else after the last "answer is"/"Answer:", else the last number.

    >>> final_number("She sells 16 - 3 - 4 = 9 eggs, 9 * 2 = $18.\\n#### 18")
    18.0
    >>> final_number("So the total is \\\\boxed{1,250} dollars.")
    1250.0
    >>> final_number("The answer is 42. Check: 40 + 2 = 42, 7 more.")
    42.0
    >>> final_number("3 apples and then 5 more"), final_number("no digits here")
    (5.0, None)
    """
    text = completion.replace("\u2212", "-")
    value = marked_number(text)
    if value is not None:
        return value
    for content in reversed(_boxed_contents(text)):
        value = parse_number(content)
        if value is None:
            value = _first_number(re.sub(r"\\[a-zA-Z]+\{[^{}]*\}", " ", content))
        if value is not None:
            return value
    answers = _ANSWER_IS.findall(text)
    if answers:
        value = _first_number(answers[-1])
        if value is not None:
            return value
    return _last_number(text)


_RESULT = re.compile(r"=\s*\**\s*\$?\s*(" + _NUMBER.replace("(?<![\\w.])", "") + r")(?!\s*[-+*/^×÷(\d])", re.VERBOSE)


def equation_result(completion: str) -> float | None:
    """The number an answer states as the result of an equation: after the first ``=``
    whose right-hand side is a lone number (not the start of more arithmetic).

    Small models restate the problem, give the result, then ramble on (often until the
    token limit) and mention other numbers; "the last number" then grades a right answer
    wrong. ``None`` when no ``= <number>`` result is stated.

    >>> equation_result("4 * 7 = 28\\n\\nIn this scenario, I used the number 7")
    28.0
    >>> equation_result("1 + 6 * 8 + 6 = 1 + 6 * 48 = 289 apples"), equation_result("no result 12")
    (289.0, None)
    >>> equation_result("694 * 783 = 53,628,400"), equation_result("x = -3.5.")
    (53628400.0, -3.5)
    """
    match = _RESULT.search(completion.replace("\u2212", "-"))
    return parse_number(match.group(1)) if match else None


def arithmetic_answer(completion: str) -> float | None:
    """A student's answer to an arithmetic question: an explicit final answer ("####",
    ``\\boxed{}``, "answer is") first, else :func:`equation_result`, else the last number.

    >>> arithmetic_answer("6 * 5 = 30\\n\\nIn this scenario, I used the number 6")
    30.0
    >>> arithmetic_answer("3 * 4 = 12. The answer is 13."), arithmetic_answer("I think 41 or 42")
    (13.0, 42.0)
    """
    text = completion.replace("\u2212", "-")
    explicit = marked_number(text) if _MARKER.search(text) else None
    if explicit is None and (_BOXED.search(text) or _ANSWER_IS.search(text)):
        explicit = final_number(text)
    if explicit is not None:
        return explicit
    result = equation_result(text)
    return result if result is not None else _last_number(text)


def numbers_equal(a: float | None, b: float | None, rel: float = 1e-6, abs: float = 1e-6) -> bool:
    """True when both are numbers and close within ``rel`` (relative) or ``abs`` (absolute).

    >>> numbers_equal(0.1 + 0.2, 0.3), numbers_equal(18, 18.5), numbers_equal(None, 1)
    (True, False, False)
    """
    if a is None or b is None:
        return False
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs)
