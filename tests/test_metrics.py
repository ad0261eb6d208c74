"""Arms-race metrics on fixed inputs with known values."""

from __future__ import annotations

import doctest
import math

import pytest
import torch

import evolora.metrics as metrics
from evolora.metrics import (
    ast_depth,
    coverage,
    cyclomatic_complexity,
    expression_depth,
    expression_metrics,
    finite_mean,
    lines_of_code,
    matchup_matrix,
    max_digits,
    mean_token_entropy,
    operator_count,
    program_metrics,
    proposal_complexity,
    response_length_stats,
    signature,
    token_entropy,
    variable_count,
)
from evolora.selfplay import GameRecord

PROGRAM = """\
# count even numbers
def count(xs, limit=10):
    total = 0
    for x in xs:
        if x % 2 == 0 and x < limit:
            total += 1
    return total

values = [n * n for n in range(5) if n]
print(count(values))
"""


def test_doctests():
    assert doctest.testmod(metrics).failed == 0


# ---------------------------------------------------------------- programs
@pytest.mark.parametrize(
    ("source", "depth"),
    [
        ("", 0),
        ("x = 1", 2),
        ("print(x)", 3),
        ("if a:\n    y = b + 1", 4),
        ("x = f(g(h(1)))", 5),
        ("def f():\n    return 1", 3),
    ],
)
def test_ast_depth(source, depth):
    assert ast_depth(source) == depth


def test_ast_depth_of_program():
    # Module > FunctionDef > For > If > BoolOp > Compare > BinOp > Name
    assert ast_depth(PROGRAM) == 7


@pytest.mark.parametrize(
    ("source", "complexity"),
    [
        ("x = 1", 1),
        ("if a:\n    x = 1", 2),
        ("if a:\n    x = 1\nelif b:\n    x = 2\nelse:\n    x = 3", 3),
        ("while a and b or c:\n    pass", 4),
        ("y = 1 if a else 2", 2),
        ("z = [i for i in r if i if j]", 4),
        ("try:\n    pass\nexcept A:\n    pass\nexcept B:\n    pass", 3),
        ("assert x", 2),
        ("match x:\n    case 1:\n        pass\n    case _:\n        pass", 3),
    ],
)
def test_cyclomatic_complexity(source, complexity):
    assert cyclomatic_complexity(source) == complexity


def test_program_metrics_known_values():
    # branches: for, if, `and`, comprehension for, comprehension if -> 1 + 5
    assert program_metrics(PROGRAM) == {"ast_depth": 7, "cyclomatic": 6, "lines": 8, "variables": 6}
    # variables: xs, limit, total, x, values, n
    assert program_metrics("def broken(:") is None
    assert program_metrics("") == {"ast_depth": 0, "cyclomatic": 1, "lines": 0, "variables": 0}


@pytest.mark.parametrize(
    ("source", "count"),
    [
        ("a = 1", 1),
        ("a = b = 2", 2),
        ("a, (b, c) = x", 3),
        ("a += 1", 1),
        ("print(a)", 0),
        ("with open(p) as f:\n    pass", 1),
        ("if (n := 3):\n    pass", 1),
        ("lambda q: q", 1),
        ("try:\n    pass\nexcept E as err:\n    pass", 1),
        ("import os\nclass C:\n    pass", 0),
        ("a.b = 1\nd[0] = 2", 0),
    ],
)
def test_variable_count(source, count):
    assert variable_count(source) == count


def test_lines_of_code():
    assert lines_of_code("") == 0
    assert lines_of_code("\n\n# only a comment\n   \n") == 0
    assert lines_of_code("x = 1  # trailing comments count\n\n    y = 2\n") == 2
    assert lines_of_code(PROGRAM) == 8


def test_syntax_errors_raise():
    for fn in (ast_depth, cyclomatic_complexity, variable_count):
        with pytest.raises(SyntaxError):
            fn("def (")


def test_deep_program_does_not_hit_the_recursion_limit():
    source = "x = " + "-" * 1500 + "1"  # deeper than the default recursion limit (1000)
    assert ast_depth(source) == 1502


# ---------------------------------------------------------------- expressions
@pytest.mark.parametrize(
    ("text", "depth", "operators", "digits"),
    [
        ("7", 0, 0, 1),
        ("3 + 4", 1, 1, 1),
        ("(3 + 4) * 2", 2, 2, 1),
        ("-3 + 45", 2, 1, 2),
        ("-(1 - 2)", 2, 1, 1),
        ("1 + 2 + 3 + 4", 3, 3, 1),
        ("(1 + 2) * (3 - 4)", 2, 3, 1),
        ("2 ** 10 // 7 % 3", 3, 3, 2),
        ("12.5 * 100", 1, 1, 3),
    ],
)
def test_expression_metrics(text, depth, operators, digits):
    assert expression_depth(text) == depth
    assert operator_count(text) == operators
    assert max_digits(text) == digits
    assert expression_metrics(text) == {"depth": depth, "operators": operators, "digits": digits}


def test_expression_metrics_bad_input():
    assert expression_metrics("3 +") is None
    assert expression_metrics("x = 1") is None  # a statement, not an expression
    assert max_digits("") == 0
    assert expression_depth("1" + "+1" * 1500) == 1500  # no recursion limit in the walk
    assert expression_metrics("-" * 100_000 + "1") is None  # the parser's own limit


# ---------------------------------------------------------------- coverage
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(3 + 4) * 2", "(#+#)*#"),
        ("(10+22)*  7", "(#+#)*#"),
        ("  -5   +  3 ", "-#+#"),
        ("1,234.5 / 2", "#/#"),
        ("Tom has 12 Apples.\n\tHe eats 3.", "tom has # apples. he eats #."),
        ("", ""),
    ],
)
def test_signature(text, expected):
    assert signature(text) == expected


def test_coverage():
    problems = ["1 + 2", "3+4", "(1 + 2) * 3", "5 * 6", "7 * 8", None]
    assert coverage(signature(p) if p else None for p in problems) == 3
    assert coverage([]) == 0


# ---------------------------------------------------------------- games
def _game(teacher, student, grades, valid=True, problem="1 + 2", program=""):
    return GameRecord(
        teacher=teacher,
        student=student,
        proposal_text="",
        problem=problem,
        program=program,
        valid=valid,
        reason="ok" if valid else "banned",
        answer=None,
        grades=grades,
    )


def test_matchup_matrix_records_and_dicts():
    games = [
        _game("t0", "s0", ["correct", "wrong", "format", "correct"]),
        _game("t0", "s1", ["wrong"]),
        _game("t0", "s0", ["correct", "correct", "correct", "correct"]),
        _game("t1", "s1", [], valid=False),
        _game("t1", "s0", ["format", "format"]),
    ]
    expected = {"t0": {"s0": 0.75, "s1": 0.0}, "t1": {"s1": None, "s0": 0.0}}
    assert matchup_matrix(games) == expected
    assert matchup_matrix([vars(g) for g in games]) == expected
    assert matchup_matrix([]) == {}


def test_proposal_complexity():
    games = [
        _game("t0", "s0", [], problem="(1 + 2) * 30"),
        _game("t0", "s0", [], problem="4 - 5"),
        _game("t0", "s0", [], valid=False, problem="1 + 2 + 3 + 4 + 5"),
    ]
    assert proposal_complexity(games, "expression") == {"count": 2, "depth": 1.5, "operators": 1.5, "digits": 1.5}
    programs = [
        _game("t0", "s0", [], program="x = 1\nprint(x)"),
        _game("t0", "s0", [], program="if a:\n    b = 1"),
        _game("t0", "s0", [], program="def ("),
    ]
    assert proposal_complexity(programs, "program") == {
        "count": 2,
        "ast_depth": 3.0,
        "cyclomatic": 1.5,
        "lines": 2.0,
        "variables": 1.0,
    }
    assert proposal_complexity([], "program") == {"count": 0}
    with pytest.raises(ValueError, match="kind"):
        proposal_complexity(games, "words")


# ---------------------------------------------------------------- samples
def test_token_entropy_known_values():
    uniform = torch.zeros(3, 8)
    assert torch.allclose(token_entropy(uniform), torch.full((3,), math.log(8)))
    peaked = torch.tensor([[0.0, -1e4, -1e4]])
    assert token_entropy(peaked).item() == pytest.approx(0.0, abs=1e-6)
    two = torch.log(torch.tensor([[0.5, 0.5, 0.0]]))  # log-probs work as logits
    assert token_entropy(two).item() == pytest.approx(math.log(2), abs=1e-6)
    batch = torch.randn(2, 5, 11)
    assert token_entropy(batch).shape == (2, 5)


def test_mean_token_entropy():
    assert mean_token_entropy([[1.0, 2.0], [3.0]]) == 2.0
    assert mean_token_entropy([[], []]) is None
    values = torch.tensor([[1.0, 5.0, 9.0], [3.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert mean_token_entropy(values, mask) == pytest.approx(3.0)
    assert mean_token_entropy(values) == pytest.approx(3.0)
    assert mean_token_entropy(values, torch.zeros_like(mask)) is None
    logits = torch.zeros(2, 3, 4)
    assert mean_token_entropy(token_entropy(logits), mask) == pytest.approx(math.log(4))


def test_response_length_stats():
    assert response_length_stats([4, 1, 10, 5]) == {"count": 4, "mean": 5.0, "median": 4.5, "min": 1, "max": 10}
    assert response_length_stats(iter([7])) == {"count": 1, "mean": 7.0, "median": 7, "min": 7, "max": 7}
    assert response_length_stats([])["mean"] is None


def test_finite_mean():
    assert finite_mean([1.0, 2.0, float("inf"), None]) == 1.5
    assert finite_mean([]) is None
