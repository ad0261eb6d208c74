"""Worked arith answers: an expression reduced one operation at a time.

``"6 - 9 - 9"`` becomes ``"6 - 9 - 9 = -3 - 9 = -12"``: each step evaluates the first binary
operation (in Python's evaluation order) whose operands are both numbers. SmolLM2-135M already
writes such chains unprompted (``1 - 3 * 8 = 1 * 8 = 8``, with the wrong order); as a reference
answer for off-policy guidance (:mod:`evolora.selfplay.guidance`, ``task.params.reference: steps``) it
shows the order and every intermediate value, so a multi-operator problem becomes a chain of
one-operator steps, the kind the students learn (arith held-out cells ``d1o1``–``d3o1``).

Source: the scratchpad idea (Nye et al., arXiv 2112.00114) on PopuLoRA's arith task
(arXiv 2605.16727 §2 step 4). Pure: text in, text out.
"""

from __future__ import annotations

import ast
import copy
from fractions import Fraction

from evolora.tasks.arith.evaluate import binary_value
from evolora.tasks.arith.text import format_number
from evolora.tasks.number_equality import numbers_equal
from evolora.tasks.numeric import arithmetic_value

_ANY_EXPONENT = 64  # the problem was verified under its own limits; a step only recomputes it


def _number(node: ast.AST) -> Fraction | None:
    """The value of a number leaf (a constant or a negated constant), else None."""
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float, Fraction))
        and not isinstance(node.value, bool)
    ):
        return Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _number(node.operand)
        if inner is not None:
            return -inner if isinstance(node.op, ast.USub) else inner
    return None


def _reduce_first(node: ast.AST) -> tuple[ast.AST, bool]:
    """(node with its first all-number binary operation replaced by its exact value, a
    ``Fraction`` constant; whether anything was left to reduce)."""
    if isinstance(node, ast.BinOp):
        left, right = _number(node.left), _number(node.right)
        if left is not None and right is not None:
            return ast.Constant(binary_value(node.op, left, right, _ANY_EXPONENT)), True
        for side in ("left", "right"):
            child, value = _reduce_first(getattr(node, side))
            if value:
                setattr(node, side, child)
                return node, True
    if isinstance(node, ast.UnaryOp) and _number(node) is None:
        child, value = _reduce_first(node.operand)
        if value:
            node.operand = child
            return node, True
    return node, False


def reduction_steps(expression: str, max_steps: int = 16) -> list[str]:
    """The expression after each single-operation reduction, the last one its value.

    Args:
        expression: a verified arith problem (``+ - * / // % **``, parentheses, integers).
        max_steps: at most this many steps (a verified problem has at most ``max_ops``).

    Returns:
        One string per step, e.g. ``["-3 - 9", "-12"]``; [] for a bare number.

    Raises:
        ValueError: the text is not an arithmetic expression or an operation is undefined
            (division by zero): only verified problems should get here.

    >>> reduction_steps("6 - 9 - 9"), reduction_steps("(4 - 3) * 7"), reduction_steps("8 * 8")
    (['-3 - 9', '-12'], ['1 * 7', '7'], ['64'])
    >>> reduction_steps("1 + 6 * (8 + 6)"), reduction_steps("7 / 2 * 4")
    (['1 + 6 * 14', '1 + 84', '85'], ['3.5 * 4', '14'])
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as error:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from error
    steps: list[str] = []
    for _ in range(max_steps):
        try:
            tree, reduced = _reduce_first(tree)
        except ValueError as error:  # ExpressionError: division by zero, a bad exponent
            raise ValueError(f"cannot reduce {expression!r}: {error!r}") from error
        if not reduced:
            break
        steps.append(ast.unparse(_Written().visit(copy.deepcopy(tree))))
    return steps


class _Written(ast.NodeTransformer):
    """A tree to print: each exact value as :func:`format_number` writes it (a name node, so
    ``unparse`` prints it verbatim), a negative one as a negation so that ``unparse`` adds the
    parentheses precedence needs (``(-3) ** 2``)."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if not isinstance(node.value, Fraction):
            return node
        name = ast.Name(id=format_number(abs(node.value)), ctx=ast.Load())
        return ast.UnaryOp(op=ast.USub(), operand=name) if node.value < 0 else name


def worked_answer(problem: str, answer: float, form: str = "steps", tolerance: float = 1e-6) -> str:
    """A verified problem's answer as a student writes it, in the form SmolLM2's own right
    answers take (``7 + 9 = 16``).

    Args:
        problem: the verified expression; answer: the verifier's value.
        form: ``answer`` for ``"<problem> = <answer>"``, ``steps`` for the
            :func:`reduction_steps` chain (the ``answer`` form when the chain cannot be written
            or does not end at ``answer`` within ``tolerance``).

    >>> worked_answer("8 + 5 + 4", 17.0), worked_answer("8 + 5 + 4", 17.0, "answer")
    ('8 + 5 + 4 = 13 + 4 = 17', '8 + 5 + 4 = 17')
    """
    short = f"{problem.strip()} = {format_number(answer)}"
    if form == "answer":
        return short
    try:
        text = " = ".join([problem.strip(), *reduction_steps(problem)])
    except ValueError:
        return short
    value = arithmetic_value(text)
    return text if value is not None and numbers_equal(value, answer, rel=tolerance, abs=tolerance) else short
