"""The arith verifier's exact evaluator: an expression's value with rational arithmetic, never ``eval``.

    value = evaluate_expression("(3 + 4) * 2")       # Fraction(14); ExpressionError(reason, ...) when refused

The text is parsed with :mod:`ast` and the tree walked here: only numbers, ``+ - * / // % **``,
unary signs and parentheses pass; limits on length, digits, operators, nesting, exponents and
magnitude bound the work. The task (:mod:`evolora.tasks.arith.task`) and its worked answers
(:mod:`evolora.tasks.arith.steps`) both evaluate with it.
Source: PopuLoRA (arXiv 2605.16727) §2 step 3 (the verifier computes the answer).
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

from evolora.parsing import PARSE_ERRORS
from evolora.tasks.expression_size import expression_depth, operator_count
from evolora.tasks.expression_size import max_digits as digits_in

ALLOWED_CHARS = re.compile(r"[0-9.+\-*/%() \t]*")


class ExpressionError(ValueError):
    """An expression the verifier refuses; ``reason`` is the Verdict reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


LIMITS: dict[str, int] = {
    "max_chars": 120,
    "max_digits": 6,
    "max_depth": 8,
    "max_ops": 10,
    "max_value": 10**12,
    "max_exponent": 4,
}
"""The default bounds of an arithmetic expression: of :func:`evaluate_expression` and of the arith
task's proposals (``task.params``; each documented in :func:`evaluate_expression`'s Args)."""


def evaluate_expression(
    text: str,
    *,
    max_chars: int = LIMITS["max_chars"],
    max_digits: int = LIMITS["max_digits"],
    max_depth: int = LIMITS["max_depth"],
    max_ops: int = LIMITS["max_ops"],
    max_value: int = LIMITS["max_value"],
    max_exponent: int = LIMITS["max_exponent"],
    min_ops: int = 0,
) -> Fraction:
    """The exact value of an arithmetic expression, computed without ``eval``.

    Grammar: number literals (integers, decimals like ``2.5``), binary ``+ - * / // % **``,
    unary ``-``/``+``, parentheses. ``**`` needs an integer exponent in [0, max_exponent].

    Args:
        max_chars: longest accepted text (also bounds the parser's work).
        max_digits: most digits in one number.
        max_depth: deepest operator nesting (:func:`evolora.tasks.expression_size.expression_depth`).
        max_ops: most binary operators (:func:`evolora.tasks.expression_size.operator_count`).
        max_value: bound on the magnitude of every literal, intermediate and final value
            (and on numerator/denominator of non-integer values).
        max_exponent: largest exponent of ``**``.
        min_ops: fewest binary operators (the task uses 1: a bare number is no problem).

    Raises:
        ExpressionError: with ``reason`` "parse" (empty, too long or not an expression),
            "banned" (any character or syntax outside the grammar), "too_deep",
            "too_many_ops", "too_few_ops", "too_many_digits", "too_large" (a value or exponent beyond
            its bound), "zero_division".

    >>> evaluate_expression("(3 + 4) * 2"), evaluate_expression("7 / 2"), evaluate_expression("-2 ** 2")
    (Fraction(14, 1), Fraction(7, 2), Fraction(-4, 1))
    """
    text = text.strip()
    if not text:
        raise ExpressionError("parse", "empty expression")
    if len(text) > max_chars:
        raise ExpressionError("parse", f"expression longer than {max_chars} characters")
    if not ALLOWED_CHARS.fullmatch(text):
        raise ExpressionError("banned", "only digits, '.', + - * / % ( ) and spaces are allowed")
    try:
        tree = ast.parse(text, mode="eval")
    except PARSE_ERRORS as exc:
        raise ExpressionError("parse", f"not an expression: {exc}") from None
    _check_nodes(tree)
    if expression_depth(tree) > max_depth:
        raise ExpressionError("too_deep", f"operator nesting deeper than {max_depth}")
    if operator_count(tree) > max_ops:
        raise ExpressionError("too_many_ops", f"more than {max_ops} operators")
    if operator_count(tree) < min_ops:
        raise ExpressionError("too_few_ops", f"fewer than {min_ops} operator(s): not a problem")
    if digits_in(text) > max_digits:
        raise ExpressionError("too_many_digits", f"a number has more than {max_digits} digits")
    return _value(tree.body, max_value, max_exponent)


_BINARY = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)


def _check_nodes(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        ok = (
            isinstance(node, (ast.Expression, ast.BinOp, *_BINARY, ast.USub, ast.UAdd))
            or (isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)))
            or (isinstance(node, ast.Constant) and type(node.value) in (int, float))
        )
        if not ok:
            raise ExpressionError("banned", f"{type(node).__name__} is not allowed in an expression")


def _bounded(value: Fraction, max_value: int) -> Fraction:
    if abs(value.numerator) > max_value * value.denominator or value.denominator > max_value:
        raise ExpressionError("too_large", f"a value exceeds the bound {max_value}")
    return value


def _value(node: ast.AST, max_value: int, max_exponent: int) -> Fraction:
    """Exact value of a checked tree; iterative over the tree (no recursion limit)."""
    results: list[Fraction] = []
    stack: list[tuple[ast.AST, bool]] = [(node, False)]
    while stack:
        current, expanded = stack.pop()
        if isinstance(current, ast.Constant):
            results.append(_bounded(Fraction(str(current.value)), max_value))
        elif not expanded:
            stack.append((current, True))
            children = [current.left, current.right] if isinstance(current, ast.BinOp) else [current.operand]
            stack.extend((child, False) for child in reversed(children))
        elif isinstance(current, ast.UnaryOp):
            results.append(-results.pop() if isinstance(current.op, ast.USub) else results.pop())
        else:
            right, left = results.pop(), results.pop()
            results.append(_bounded(binary_value(current.op, left, right, max_exponent), max_value))
    return results[0]


def binary_value(op: ast.operator, left: Fraction, right: Fraction, max_exponent: int) -> Fraction:
    if isinstance(op, ast.Add):
        return left + right
    if isinstance(op, ast.Sub):
        return left - right
    if isinstance(op, ast.Mult):
        return left * right
    if isinstance(op, ast.Pow):
        if right.denominator != 1 or not 0 <= right <= max_exponent:
            raise ExpressionError("too_large", f"exponents must be whole numbers in [0, {max_exponent}]")
        return left ** int(right)
    if right == 0:
        raise ExpressionError("zero_division", "division by zero")
    if isinstance(op, ast.Div):
        return left / right
    if isinstance(op, ast.FloorDiv):
        return Fraction(left // right)
    return left % right  # ast.Mod, Python semantics (sign of the divisor)
