"""Text helpers of the ``arith`` task: cleaning what a model wrote into an expression, and
random expressions (the held-out grid and the teacher's random reference examples).

Source: PopuLoRA (arXiv 2605.16727) §2 step 2 (teacher proposals, reference examples).
"""

from __future__ import annotations

import random
import re
from fractions import Fraction

_SYMBOLS = {"×": "*", "·": "*", "÷": "/", "−": "-", "–": "-", "^": "**", "[": "(", "]": ")"}
_LEAD_WORDS = re.compile(r"^(?:what\s+is|what's|compute|calculate|evaluate|find|solve)\s*:?\s*", re.IGNORECASE)
_GRID_OPERATORS = ("+", "-", "*")
_PRECEDENCE = {"+": 1, "-": 1, "*": 2}


def normalise_expression(line: str) -> str:
    """Clean one line a model wrote into a candidate expression (no validity check).

    >>> normalise_expression("**What is 12 × 3 − 4?** = 32")
    '12 * 3 - 4'
    >>> normalise_expression("$ (2+3)^2 = ? $"), normalise_expression("`6 x 7`.")
    ('(2+3)**2', '6 * 7')
    """
    text = line.strip().strip("*`$ \t").strip()
    text = text.replace("\\times", "*").replace("\\div", "/").replace("\\cdot", "*")
    for symbol, replacement in _SYMBOLS.items():
        text = text.replace(symbol, replacement)
    text = re.sub(r"(?<=[\d)\s])[xX](?=[\s(\d])", "*", text)  # 6 x 7
    text = text.split("=")[0]
    text = _LEAD_WORDS.sub("", text.strip().strip("*`$ ").strip())
    text = text.strip().rstrip("?.!:;,").strip().strip("*`$").strip()
    return " ".join(text.split())


_SPAN = re.compile(r"[0-9.+\-*/%() \t]+")


def _arithmetic_span(text: str) -> str:
    """The longest run of expression characters that holds a digit and an operator (else
    the longest with a digit), trimmed of dangling operators and unbalanced parentheses.

    >>> _arithmetic_span("Given the statement 15 / 3, is it 5?"), _arithmetic_span("Solve 4. now")
    ('15 / 3', '4')
    """
    spans = [m.group(0).strip(" \t.") for m in _SPAN.finditer(text)]
    spans = [s for s in spans if any(c.isdigit() for c in s)]
    if not spans:
        return ""
    best = max(spans, key=lambda s: (bool(re.search(r"\d\s*[-+*/%]", s)), len(s)))
    best = best.strip(" \t+*/%")
    if best.count("(") != best.count(")"):
        best = best.strip("()").strip()
    return best


def random_expression(rng: random.Random, digits: int, ops: int) -> str:
    """A random expression: a random binary tree with ``ops`` operators from + - * over
    ``digits``-digit numbers (1-digit: 1-9), printed with the parentheses it needs.

    >>> random_expression(random.Random(0), 1, 2), random_expression(random.Random(1), 2, 3)
    ('1 * 5 - 8', '82 - 42 * (73 - 67)')
    """
    low, high = (1, 9) if digits == 1 else (10 ** (digits - 1), 10**digits - 1)

    def build(n: int) -> tuple[str, int]:  # (text, precedence); a number binds tightest (3)
        if n == 0:
            return str(rng.randint(low, high)), 3
        left_ops = rng.randint(0, n - 1)
        left, right = build(left_ops), build(n - 1 - left_ops)
        op = rng.choice(_GRID_OPERATORS)
        level = _PRECEDENCE[op]
        left_text = f"({left[0]})" if left[1] < level else left[0]
        right_text = f"({right[0]})" if right[1] < level or (right[1] == level and op == "-") else right[0]
        return f"{left_text} {op} {right_text}", level

    return build(ops)[0]


def format_number(value: Fraction | float) -> str:
    """An answer as a student should write it: ``14``, ``-3``, ``3.5``.

    >>> format_number(Fraction(14)), format_number(Fraction(7, 2)), format_number(-3.0)
    ('14', '3.5', '-3')
    """
    value = Fraction(value)
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"
