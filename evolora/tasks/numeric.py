"""Parse and compare numeric answers written by models and programs.

Pure functions, no I/O. ``parse_exact`` reads a string that *is* a number (as a program
prints it, or as it follows "####") into an exact :class:`fractions.Fraction`;
``final_value`` finds a student's final answer in free text; ``evolora.tasks.number_equality.numbers_equal`` compares:
integers and rationals exactly, only genuinely non-integer values with a tolerance. The
``*_number`` functions are the same readers returning floats.

Every reader is linear in its input (one pass of regexes without nested or overlapping
quantifiers; no rescans) and reads at most :data:`MAX_TEXT_CHARS` characters.

Source: PopuLoRA (arXiv 2605.16727) §2 step 4 (grading the student); the "#### <number>"
final-answer format of GSM8K (Cobbe et al. 2021, arXiv 2110.14168).
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from fractions import Fraction

MAX_TEXT_CHARS = 50_000
"""Free text beyond this many characters is not read (completions are token-limited far below it)."""
MAX_DIGITS = 1000
"""Most digits in one number (and largest exponent); longer numbers are not read as numbers."""
MAX_NUMBER_CHARS = 2 * MAX_DIGITS + 100
"""Longest string :func:`parse_exact` reads (after stripping surrounding whitespace)."""
FLOAT_NOISE = Fraction(1, 10**12)
"""Rounding noise allowed for a float operand: relative, absolute below 1 (float64 steps add ~1e-16)."""
EXACT_FLOAT_INT = 2**53  # every integer up to this magnitude is exact as a float

_SYMBOLS = str.maketrans(
    {
        "\u2212": "-",
        "\ufe63": "-",
        "\uff0d": "-",
        "\uff04": "$",
        "\uff0c": ",",
        "\uff0e": ".",
        "\uff05": "%",
        "\uff0f": "/",
        "\uff03": "#",
        "\uff1d": "=",
        "\uff1a": ":",
        "\u066b": ".",
        "\u066c": ",",
        "\u066a": "%",
    }
)
_UNICODE_DIGIT = re.compile(r"(?![0-9])\d")  # a decimal digit of another script: ４, ٤, ۴, ४, ...
_START = r"(?<![\w.])(?:(?<![-+])[-+]*-|(?<![-+][-+]))"  # a whole sign run ("--5" reads as None)
_NUMBER = (
    _START
    + r"""
    (?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)  # integer part, optionally with thousands commas
    (?:\.[0-9]+)?                    # decimals
    (?:[eE][-+]?[0-9]+)?             # exponent
    (?:/[0-9]+(?![0-9.]))?           # a simple fraction 3/4
    |"""
    + _START
    + r"\.[0-9]+"
)  # .5
_NUMBER_RE = re.compile(_NUMBER, re.VERBOSE)
_DECIMAL = re.compile(r"(?P<int>[0-9]{1,3}(?:,[0-9]{3})+|[0-9]*)(?:\.(?P<frac>[0-9]*))?(?:[eE](?P<exp>[-+]?[0-9]+))?")
_RATIO = re.compile(r"([0-9]+)/([0-9]+)")
_LATEX_FRAC = re.compile(r"\\[dt]?frac\{([^{}]+)\}\{([^{}]+)\}")
_MARKER = re.compile(r"####\s*(.*)")
_BOXED = re.compile(r"\\boxed\s*\{")
_BRACE = re.compile(r"\\([a-zA-Z]+)\s*\{|[{}]")  # a command's opening brace, or any brace
_ANSWER_IS = re.compile(r"(?:final answer|answer)\s*(?:is|=|:)[\s*]*(?:\\\()?\s*(.*)", re.IGNORECASE)
_RESULT_START = re.compile(r"=[\s*]*(?=[-.0-9])")  # "=" then spaces/bold, then what may start a number
_MORE_ARITHMETIC = frozenset("-+*/^×÷(0123456789")
_SPACES = re.compile(r"\s*")
_BOXED_WHOLE_CHARS = 256  # a boxed content longer than this is not parsed as one number (tokens still are)


def _normalise(text: str) -> str:
    """Digits of any script to ASCII, Unicode minus and full-width symbols to ASCII (1:1 in length)."""
    if text.isascii():
        return text
    return _UNICODE_DIGIT.sub(lambda m: str(unicodedata.decimal(m.group())), text.translate(_SYMBOLS))


def _clean(completion: str) -> str:
    """Free text as the readers see it: capped, normalised, currency signs dropped."""
    return _normalise(completion[:MAX_TEXT_CHARS]).replace("$", "")


def _decimal_value(s: str) -> Fraction | None:
    match = _DECIMAL.fullmatch(s)
    if match is None:
        return None
    digits, frac, exp = match["int"].replace(",", ""), match["frac"] or "", match["exp"] or "0"
    too_long = len(digits) + len(frac) > MAX_DIGITS or len(exp.lstrip("+-0")) > 4 or abs(int(exp)) > MAX_DIGITS
    if too_long or not (digits or frac):
        return None
    power, mantissa = int(exp) - len(frac), int(digits + frac)
    return Fraction(mantissa * 10**power) if power >= 0 else Fraction(mantissa, 10**-power)


def parse_exact(text: str) -> Fraction | None:
    """The exact value of a string that is a single number; None otherwise.

    Accepts thousands separators, a currency sign, a trailing percent sign or period
    (the number as written: "50%" -> 50), simple fractions and LaTeX ``\\frac``,
    scientific notation, Unicode minus, digits of any script (full-width ``４２``,
    Arabic-Indic ``٤٢``) and surrounding Markdown bold. At most one sign ("--5" is None);
    at most :data:`MAX_DIGITS` digits and exponent magnitude; strings longer than
    :data:`MAX_NUMBER_CHARS` after stripping are None. Linear time. Never raises.

    >>> [str(parse_exact(s)) for s in ["1,234", "$5.50", "3/4", "-2", "1e3", "50%", "0.1"]]
    ['1234', '11/2', '3/4', '-2', '1000', '50', '1/10']
    >>> parse_exact("--5"), parse_exact("1/0"), parse_exact("1e1001"), parse_exact("٤٢")
    (None, None, None, Fraction(42, 1))
    """
    s = text.strip()
    if len(s) > MAX_NUMBER_CHARS:
        return None
    s = _normalise(s).strip("*").strip().rstrip(".").rstrip("%").strip()
    negative = s.startswith("-")
    if negative:
        s = s[1:].lstrip()
    if s.startswith("$"):
        s = s.lstrip("$").lstrip()
        if s.startswith("-") and not negative:  # "$-5"; "-$-5" stays malformed
            negative, s = True, s[1:]
    latex, ratio = _LATEX_FRAC.fullmatch(s), _RATIO.fullmatch(s)
    if latex or ratio:
        parts = latex.groups() if latex else ratio.groups()
        num, den = (parse_exact(part) if latex else _decimal_value(part) for part in parts)
        value = None if num is None or not den else num / den
    else:
        value = _decimal_value(s)
    if value is None:
        return None
    return -value if negative else value


def _to_float(value: Fraction | None) -> float | None:
    try:
        return None if value is None else float(value)
    except OverflowError:
        return None


def parse_number(text: str) -> float | None:
    """:func:`parse_exact` as a float; None also when the value is beyond float range.

    >>> [parse_number(s) for s in ["1,234", "$5.50", "3/4", "-2", "1e3", "50%", " 7. "]]
    [1234.0, 5.5, 0.75, -2.0, 1000.0, 50.0, 7.0]
    >>> parse_number("\\\\frac{1}{2}"), parse_number("−3"), parse_number("**12**")
    (0.5, -3.0, 12.0)
    >>> [parse_number(s) for s in ["", "abc", "1 2", "nan", "inf", "1/0", "12 apples", "--5"]]
    [None, None, None, None, None, None, None, None]
    """
    return _to_float(parse_exact(text))


def json_number(value: Fraction | int | float, *, nearest: bool = False) -> int | float | None:
    """A number as JSON stores it: an ``int`` for an integer beyond 2**53 (exact), else a
    float. A non-integer beyond float range is None, or with ``nearest`` its nearest int.

    >>> json_number(Fraction(18)), json_number(Fraction(7, 2)), json_number(Fraction(10**20 + 1))
    (18.0, 3.5, 100000000000000000001)
    """
    value = Fraction(value)
    if value.denominator == 1 and abs(value) > EXACT_FLOAT_INT:
        return int(value)
    number = _to_float(value)
    return round(value) if number is None and nearest else number


def _first_in(text: str, start: int, end: int) -> Fraction | None:
    """The value of the first number token in ``text[start:end]`` (None if none or unreadable)."""
    match = _NUMBER_RE.search(text, start, end)
    return parse_exact(match.group(0)) if match else None


def _in_last(pattern: re.Pattern, text: str, group: int = 1) -> Fraction | None:
    """The first number in ``group`` of the last match of ``pattern`` (one pass)."""
    match = None
    for match in pattern.finditer(text):
        pass
    return _first_in(text, match.start(group), match.end(group)) if match else None


def _marked(text: str) -> Fraction | None:
    return _in_last(_MARKER, text)


def marked_value(completion: str) -> Fraction | None:
    """The exact number after the last "####" marker (GSM8K's final-answer format, Cobbe
    et al. 2021, arXiv 2110.14168), or None when there is none. Linear time.

    >>> marked_value("so 9 * 2 = 18\\n#### 18"), marked_value("18")
    (Fraction(18, 1), None)
    """
    return _marked(_clean(completion))


def marked_number(completion: str) -> float | None:
    """:func:`marked_value` as a float (None also beyond float range).

    >>> marked_number("so 9 * 2 = 18\\n#### 18"), marked_number("18")
    (18.0, None)
    """
    return _to_float(marked_value(completion))


def _boxes_and_arguments(text: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Content spans of every closed ``\\boxed{...}`` (in order of opening) and of every
    closed brace-free ``\\command{...}`` argument, from one pass over the braces."""
    stack: list[list] = []  # [content start, opener name or None, holds a brace]
    boxes, arguments = [], []
    for match in _BRACE.finditer(text):
        if match.group(0) == "}":
            if stack:
                start, name, nested = stack.pop()
                if name == "boxed":
                    boxes.append((start, match.start()))
                elif name and not nested:
                    arguments.append((start, match.start()))
            continue
        if stack:
            stack[-1][2] = True
        stack.append([match.end(), match.group(1), False])
    boxes.sort()
    return boxes, sorted(arguments)


def _boxed(text: str) -> Fraction | None:
    """The last boxed answer: its whole content as one number, else its first number not
    inside a command argument such as ``\\text{...}``; earlier boxes when that fails."""
    if _BOXED.search(text) is None:
        return None
    boxes, arguments = _boxes_and_arguments(text)
    tokens, arg_index = [], 0
    for match in _NUMBER_RE.finditer(text):  # tokens outside command arguments
        while arg_index < len(arguments) and arguments[arg_index][1] <= match.start():
            arg_index += 1
        if arg_index < len(arguments) and arguments[arg_index][0] <= match.start():
            continue
        tokens.append(match)
    starts = [token.start() for token in tokens]
    for start, end in reversed(boxes):
        value = parse_exact(text[start:end]) if end - start <= _BOXED_WHOLE_CHARS else None
        if value is None:
            index = bisect.bisect_left(starts, start)
            if index < len(tokens) and tokens[index].end() <= end:
                value = parse_exact(tokens[index].group(0))
        if value is not None:
            return value
    return None


def _answer_is(text: str) -> Fraction | None:
    return _in_last(_ANSWER_IS, text)


def _last(text: str) -> Fraction | None:
    return _in_last(_NUMBER_RE, text, group=0)


def _final(text: str) -> Fraction | None:
    for reader in (_marked, _boxed, _answer_is, _last):
        value = reader(text)
        if value is not None:
            return value
    return None


def final_value(completion: str) -> Fraction | None:
    """A student's final answer, exact: the first number after the last "#### ", else in
    the last ``\\boxed{}``, else after the last "answer is"/"Answer:", else the last
    number; None when there is none. Reads the first :data:`MAX_TEXT_CHARS` characters,
    linear time, never raises.

    >>> final_value("She sells 16 - 3 - 4 = 9 eggs, 9 * 2 = $18.\\n#### 18")
    Fraction(18, 1)
    >>> final_value("So the total is \\\\boxed{1,250} dollars."), final_value("no digits here")
    (Fraction(1250, 1), None)
    """
    return _final(_clean(completion))


def final_number(completion: str) -> float | None:
    """:func:`final_value` as a float (None also beyond float range).

    >>> final_number("So the total is \\\\boxed{1,250} dollars.")
    1250.0
    >>> final_number("The answer is 42. Check: 40 + 2 = 42, 7 more.")
    42.0
    >>> final_number("3 apples and then 5 more"), final_number("no digits here")
    (5.0, None)
    """
    return _to_float(final_value(completion))


def _equation(text: str) -> Fraction | None:
    for start in _RESULT_START.finditer(text):
        token = _NUMBER_RE.match(text, start.end())
        if token is None:
            continue
        after = _SPACES.match(text, token.end()).end()
        value = parse_exact(token.group(0))
        if value is not None and (after == len(text) or text[after] not in _MORE_ARITHMETIC):
            return value
    return None


def equation_result(completion: str) -> float | None:
    """The number an answer states as the result of an equation: after the first ``=``
    whose right-hand side is a lone number (not the start of more arithmetic). Linear time.

    Small models restate the problem, give the result, then ramble on (often until the
    token limit) and mention other numbers; "the last number" then grades a right answer
    wrong. ``None`` when no ``= <number>`` result is stated (or it is beyond float range).

    >>> equation_result("4 * 7 = 28\\n\\nIn this scenario, I used the number 7")
    28.0
    >>> equation_result("1 + 6 * 8 + 6 = 1 + 6 * 48 = 289 apples"), equation_result("no result 12")
    (289.0, None)
    >>> equation_result("694 * 783 = 53,628,400"), equation_result("x = -3.5.")
    (53628400.0, -3.5)
    """
    return _to_float(_equation(_clean(completion)))


def arithmetic_value(completion: str) -> Fraction | None:
    """A student's answer to an arithmetic question, exact: an explicit final answer
    ("####", ``\\boxed{}``, "answer is") first, else the stated result of an equation
    (:func:`equation_result`), else the last number. Linear time, never raises.

    >>> arithmetic_value("6 * 5 = 30\\n\\nIn this scenario, I used the number 6")
    Fraction(30, 1)
    """
    text = _clean(completion)
    explicit = _marked(text) if "####" in text else None
    if explicit is None and (_BOXED.search(text) or _ANSWER_IS.search(text)):
        explicit = _final(text)
    if explicit is not None:
        return explicit
    result = _equation(text)
    return result if result is not None else _last(text)


def arithmetic_answer(completion: str) -> float | None:
    """:func:`arithmetic_value` as a float (None also beyond float range).

    >>> arithmetic_answer("6 * 5 = 30\\n\\nIn this scenario, I used the number 6")
    30.0
    >>> arithmetic_answer("3 * 4 = 12. The answer is 13."), arithmetic_answer("I think 41 or 42")
    (13.0, 42.0)
    """
    return _to_float(arithmetic_value(completion))
