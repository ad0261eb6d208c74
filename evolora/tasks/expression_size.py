"""Size measures of an arithmetic expression: operator nesting depth, binary operators, digits.

The arith verifier bounds proposals with them and the run's analytics report them
(:func:`evolora.metrics.expression_metrics`); pure functions of the text, no dependencies.
Source: PopuLoRA (arXiv 2605.16727) §4 (problem complexity over training).
"""

from __future__ import annotations

import ast
import re

_DIGIT_RUN = re.compile(r"\d+(?:\.\d+)?")


def expression_tree(text: str | ast.AST) -> ast.AST:
    """The syntax tree of an expression (its body, not the ``Expression`` wrapper); a tree passes through.

    Raises:
        SyntaxError: ``text`` is not a Python expression.
    """
    tree = text if isinstance(text, ast.AST) else ast.parse(text, mode="eval")
    return tree.body if isinstance(tree, ast.Expression) else tree


def expression_depth(text: str | ast.AST) -> int:
    """Operator nesting depth of an arithmetic expression: a number is 0, an operator
    (binary or unary) is 1 + the depth of its deepest operand; parentheses add nothing.

    >>> expression_depth("7"), expression_depth("3 + 4"), expression_depth("(3 + 4) * 2"), expression_depth("-(1 - 2)")
    (0, 1, 2, 2)

    Raises:
        SyntaxError: ``text`` is not a Python expression.
    """
    deepest, stack = 0, [(expression_tree(text), 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, ast.BinOp):
            stack += [(node.left, depth + 1), (node.right, depth + 1)]
        elif isinstance(node, ast.UnaryOp):
            stack.append((node.operand, depth + 1))
        else:
            deepest = max(deepest, depth)
    return deepest


def operator_count(text: str | ast.AST) -> int:
    """Binary operators (``+ - * / // % **``) in an expression; unary signs are not counted.

    >>> operator_count("7"), operator_count("-3 + 4"), operator_count("(1 + 2) * (3 - 4) ** 2")
    (0, 1, 4)

    Raises:
        SyntaxError: ``text`` is not a Python expression.
    """
    return sum(isinstance(node, ast.BinOp) for node in ast.walk(expression_tree(text)))


def max_digits(text: str) -> int:
    """Most digits in one number written in ``text`` (a decimal point is not a digit); 0 when none.

    >>> max_digits("12 * 345"), max_digits("1.25 + 3"), max_digits("no numbers")
    (3, 3, 0)
    """
    return max((len(m.group(0).replace(".", "")) for m in _DIGIT_RUN.finditer(text)), default=0)
