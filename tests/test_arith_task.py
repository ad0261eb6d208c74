"""The arith task: safe expression evaluation, proposal parsing, grading, the held-out grid."""

from __future__ import annotations

import doctest
import pickle
import random
from fractions import Fraction

import pytest

import evolora.tasks.arith.task as arith
import evolora.tasks.numeric as numeric
from evolora.tasks import TASKS, make_task
from evolora.tasks.arith import ArithTask
from evolora.tasks.arith.evaluate import ExpressionError, evaluate_expression
from evolora.tasks.arith.text import normalise_expression
from evolora.tasks.base import Grade, HeldOutItem, Proposal, Task


def test_doctests():
    assert doctest.testmod(arith).failed == 0
    result = doctest.testmod(numeric)
    assert result.failed == 0 and result.attempted >= 14


def test_registered_and_protocol():
    assert TASKS["arith"] is ArithTask
    task = make_task("arith", max_ops=4)
    assert isinstance(task, Task)
    assert task.proposal_prefix == "Problem:"
    pickle.loads(pickle.dumps(task))


# ---------------------------------------------------------------- the verifier
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3 + 4", 7),
        ("(3 + 4) * 2", 14),
        ("12 - 9 * 2", -6),
        ("-5 + 3", -2),
        ("--5", 5),
        ("+7 - 1", 6),
        ("7 / 2 * 2", 7),
        ("7 / 2", Fraction(7, 2)),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 % 3", 1),
        ("-7 % 3", 2),
        ("2 ** 3", 8),
        ("-2 ** 2", -4),
        ("(-2) ** 2", 4),
        ("2 ** 0", 1),
        ("2.5 * 4", 10),
        ("0.1 + 0.2", Fraction(3, 10)),
        ("((1 + 2))", 3),
        ("  9 * 9 ", 81),
        ("999999 * 999999", 999998000001),
    ],
)
def test_evaluate_good(text, value):
    assert evaluate_expression(text) == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "parse"),
        ("3 +", "parse"),
        ("(3 + 4", "parse"),
        ("1 2", "parse"),
        ("...", "banned"),
        ("()", "banned"),
        ("1 / 0", "zero_division"),
        ("5 // (2 - 2)", "zero_division"),
        ("5 % 0", "zero_division"),
        ("x + 1", "banned"),
        ("__import__('os').system('ls')", "banned"),
        ("print(1)", "banned"),
        ("(1).__class__", "banned"),
        ("abs(-3)", "banned"),
        ("1 if 1 else 2", "banned"),
        ("1 < 2", "banned"),
        ("[1, 2]", "banned"),
        ("'a' * 3", "banned"),
        ("1e9 * 1", "banned"),
        ("0x10 + 1", "banned"),
        ("1_000 + 1", "banned"),
        ("2j * 2", "banned"),
        ("1 & 3", "banned"),
        ("1 << 3", "banned"),
        ("lambda: 1", "banned"),
        ("2 ** 100", "too_large"),
        ("9 ** 9 ** 9", "too_large"),
        ("2 ** -1", "too_large"),
        ("2 ** 0.5", "too_large"),
        ("999999 * 999999 * 999999", "too_large"),
        ("1 / 3 / 999999 / 999999", "too_large"),
        ("1234567 + 1", "too_many_digits"),
        ("*".join(["(1+1+1)"] * 4), "too_many_ops"),
        ("-" * 9 + "1 + 1", "too_deep"),
        ("(" * 9 + "1" + "+1)" * 9, "too_deep"),
        ("(" * 300 + "1" + ")" * 300, "parse"),
        ("1+" * 500 + "1", "parse"),
    ],
)
def test_evaluate_refuses(text, reason):
    with pytest.raises(ExpressionError) as info:
        evaluate_expression(text)
    assert info.value.reason == reason


def test_limits_are_configurable():
    assert evaluate_expression("2 ** 10", max_exponent=10) == 1024
    with pytest.raises(ExpressionError, match="digits"):
        evaluate_expression("12 + 3", max_digits=1)
    with pytest.raises(ExpressionError) as info:
        evaluate_expression("7", min_ops=1)
    assert info.value.reason == "too_few_ops"


@pytest.mark.parametrize(
    ("text", "valid", "reason", "answer"),
    [
        ("Problem: (3 + 4) * 2", True, "ok", 14.0),
        ("Problem: 7 / 2", False, "not_integer", None),
        ("Problem: 1 / 0", False, "zero_division", None),
        ("Problem: 42", False, "too_few_ops", None),
        ("Problem: 2 ** 99", False, "too_large", None),
    ],
)
def test_verify(text, valid, reason, answer):
    task = ArithTask()
    (verdict,) = task.verify([task.parse_proposal(text)])
    assert (verdict.valid, verdict.reason, verdict.answer) == (valid, reason, answer)


def test_verify_none_and_non_integer_option():
    assert ArithTask().verify([None])[0].reason == "parse"
    verdict = ArithTask(integer_only=False).verify([ArithTask().parse_proposal("Problem: 7 / 2")])[0]
    assert verdict.valid and verdict.answer == 3.5


# ---------------------------------------------------------------- proposals
@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Problem: 5 + 3", "5 + 3"),
        ("Problem: 5 + 3 = 8\nmore text", "5 + 3"),
        ("Problem:\n\n 6 * 7 = ?", "6 * 7"),
        ("Problem: What is 12 × 3 − 4?", "12 * 3 - 4"),
        ("Problem: **(2+3)^2**", "(2+3)**2"),
        ("Problem: 6 x 7.", "6 * 7"),
        ("Problem: $8 \\div 2$", "8 / 2"),
        ("Problem: Given the statement 15 / 3 = 5", "15 / 3"),
        ("Problem: [2 + 1] * 3", "(2 + 1) * 3"),
        ("9 - 4", "9 - 4"),
        ("Problem: 1 + 1\nProblem: 2 + 2", "1 + 1"),
    ],
)
def test_parse_proposal(text, problem):
    proposal = ArithTask().parse_proposal(text)
    assert isinstance(proposal, Proposal)
    assert proposal.problem == problem and proposal.program == problem and proposal.raw == text


@pytest.mark.parametrize("text", ["Problem: ", "Problem: In ΔARK we add triangles", "", "Problem:\n\n"])
def test_parse_proposal_none(text):
    assert ArithTask().parse_proposal(text) is None


def test_strict_parse_leaves_words_to_the_verifier():
    task = ArithTask(lenient_parse=False)
    proposal = task.parse_proposal("Problem: Given 15 / 3")
    assert proposal.problem == "Given 15 / 3"
    assert task.verify([proposal])[0].reason == "banned"


def test_normalise_expression_drops_the_answer():
    assert normalise_expression("3 + 4 = 7") == "3 + 4"


# ---------------------------------------------------------------- prompts and grading
def test_prompts_are_short():
    task = ArithTask()
    messages = task.proposal_prompt(random.Random(0))
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"].count("Problem: ") == 3
    assert len(messages[1]["content"]) < 300
    assert task.proposal_prompt(random.Random(0)) == messages  # rng decides the examples
    assert ArithTask(num_examples=0).proposal_prompt(random.Random(0))[1]["content"].count("Problem:") == 0
    solve = task.solve_prompt(" 3 + 4 ")
    assert solve == [{"role": "user", "content": "What is 3 + 4? Answer with a number."}]
    stepwise = ArithTask(student_instruction=" Work it out step by step. ")
    assert stepwise.solve_prompt("3 + 4") == [{"role": "user", "content": "What is 3 + 4? Work it out step by step."}]
    item = stepwise.held_out(1, None)[0]
    assert stepwise.held_out_prompt(item)[-1]["content"].endswith("Work it out step by step.")  # held-out too


@pytest.mark.parametrize(
    ("completion", "answer", "grade"),
    [
        ("The answer is 14.", 14.0, Grade("correct", 14.0)),
        ("14", 14.0, Grade("correct", 14.0)),
        ("(3 + 4) * 2 = 14", 14.0, Grade("correct", 14.0)),
        ("The answer is -6", -6.0, Grade("correct", -6.0)),
        ("The answer is 13.", 14.0, Grade("wrong", 13.0)),
        ("I do not know", 14.0, Grade("format", None)),
        ("3.5", 3.5, Grade("correct", 3.5)),
        ("1,265", 1265.0, Grade("correct", 1265.0)),
        # SmolLM2 states the result, then rambles on to the token limit (seen in held-out runs)
        ("4 * 7 = 28\n\nIn this scenario, I used the number 7 to represent the", 28.0, Grade("correct", 28.0)),
        ("87 - 20 = 5", 67.0, Grade("wrong", 5.0)),
        ("1 + 6 * 8 + 6 = 1 + 6 * 8 + 6 = ", 55.0, Grade("wrong", 6.0)),
        ("3 * 4 = 12. The answer is 13.", 12.0, Grade("wrong", 13.0)),
    ],
)
def test_grade(completion, answer, grade):
    assert ArithTask().grade(completion, answer) == grade


# ---------------------------------------------------------------- held-out grid
def test_grid_is_deterministic_and_covers_difficulties():
    task = ArithTask()
    grid = task.held_out(1000, random.Random(1))
    assert len(grid) == 90 and all(isinstance(item, HeldOutItem) for item in grid)
    assert [i.question for i in grid] == [i.question for i in ArithTask().held_out(1000, random.Random(2))]
    assert len({i.question for i in grid}) == 90
    for item in grid:
        assert evaluate_expression(item.question) == item.answer and float(item.answer).is_integer()
    cells = [
        (
            max(len(n) for n in item.question.replace("(", " ").replace(")", " ").split() if n.isdigit()),
            sum(item.question.count(op) for op in " + - * ".split()),
        )
        for item in grid
    ]
    assert set(cells[:9]) == {(d, k) for d in (1, 2, 3) for k in (1, 2, 3)}  # first 9: one per cell
    assert cells[:9] == cells[9:18]  # interleaved in a fixed cell order
    assert cells[0] == (1, 1)  # easiest first
    assert [item.group for item in grid] == [f"d{d}o{k}" for d, k in cells]  # the cell, as measured from the text
    assert all(cells[:36].count(cell) == 4 for cell in set(cells))
    assert task.held_out(5, random.Random(0)) == grid[:5] and task.held_out(0, random.Random(0)) == []


def test_grid_depends_on_seed_and_size():
    first = [i.question for i in ArithTask(eval_seed=0).held_out(9, None)]
    assert first != [i.question for i in ArithTask(eval_seed=1).held_out(9, None)]
    assert len(ArithTask(eval_digits=1, eval_ops=2, eval_per_cell=3).held_out(100, None)) == 6


# ---------------------------------------------------------------- configuration
@pytest.mark.parametrize(
    "params",
    [
        {"num_examples": -1},
        {"num_examples": 11},
        {"max_digits": 0},
        {"max_depth": 0},
        {"max_ops": 0},
        {"max_value": 5},
        {"max_value": 2**60},
        {"max_exponent": -1},
        {"eval_digits": 7},
        {"eval_ops": 0},
        {"eval_per_cell": 0},
        {"tolerance": -1.0},
        {"max_ops": 2.5},
        {"max_ops": True},
        {"integer_only": "yes"},
        {"lenient_parse": 1},
        {"student_instruction": ""},
        {"student_instruction": "  "},
        {"student_instruction": 3},
    ],
)
def test_bad_params(params):
    with pytest.raises(ValueError, match="arith task"):
        ArithTask(**params)


def test_too_many_per_cell_raises():
    with pytest.raises(ValueError, match="eval_per_cell"):
        ArithTask(eval_digits=1, eval_ops=1, eval_per_cell=500).held_out(1, None)


def test_yaml_config_loads():
    from evolora.config import load_config

    config = load_config("tasks/arith.yaml")
    assert config.task.name == "arith" and config.eval.limit == 90  # the whole held-out grid
    assert config.selfplay.roles["teacher"].max_new_tokens == 24 and config.run.steps == 25
    assert config.selfplay.sampling("teacher").temperature == 0.7
    assert config.selfplay.sampling("student").temperature == 0.5
    assert config.task.params["examples"] == "random" and config.selfplay.rewards.repetition == 0.5
    assert config.selfplay.roles["student"].stop == (
        "\n",
    )  # one-line answers (benchmarks/results/arith_study_2026-12-01b.txt)
