"""The gsm task: number parsing, proposal parsing, verification, grading, held-out data."""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path

import pytest

from evolora.sandbox import run_program
from evolora.tasks import TASKS, GSMTask, make_task, register_task
from evolora.tasks.base import Grade, HeldOutItem, Proposal, Task
from evolora.tasks.gsm.params import EXAMPLES_PATH
from evolora.tasks.gsm.task import format_proposal, program_answer
from evolora.tasks.number_equality import numbers_equal
from evolora.tasks.numeric import final_number, parse_number

GSM8K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k"  # ../shared beside the repo
needs_gsm8k = pytest.mark.skipif(not (GSM8K / "test.jsonl").is_file(), reason="GSM8K not here")


# ---------------------------------------------------------------- numeric parsing
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("18", 18.0),
        ("1,234", 1234.0),
        ("$5.50", 5.5),
        ("3/4", 0.75),
        ("-2", -2.0),
        ("1e3", 1000.0),
        ("50%", 50.0),
        ("7.", 7.0),
        (" 12.0\n", 12.0),
        ("−3", -3.0),
        ("$-4", -4.0),
        ("-$4", -4.0),
        ("\\frac{3}{4}", 0.75),
        (".5", 0.5),
        ("**9**", 9.0),
        ("", None),
        ("abc", None),
        ("12 apples", None),
        ("1/0", None),
        ("nan", None),
        ("inf", None),
        ("1e999", None),
        ("1,23", None),
        ("[1, 2]", None),
        ("None", None),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize(
    ("completion", "value"),
    [
        ("9 * 2 = 18\n#### 18", 18.0),
        ("#### $1,080.", 1080.0),
        ("first 5\n#### 7\nthen 9", 7.0),
        ("She has \\boxed{42} apples, 3 left", 42.0),
        ("\\boxed{\\frac{1}{2}}", 0.5),
        ("\\boxed{12 \\text{ dollars}}", 12.0),
        ("So the answer is 36. Check 6*6.", 36.0),
        ("Answer: -3", -3.0),
        ("**Final answer:** 2.5 hours", 2.5),
        ("He had 3, then 10-4 = 6 apples.", 6.0),
        ("It costs $5.50 each.", 5.5),
        ("no number here", None),
        ("", None),
    ],
)
def test_final_number(completion, value):
    assert final_number(completion) == value


def test_numbers_equal_tolerance():
    assert numbers_equal(0.1 + 0.2, 0.3)
    assert not numbers_equal(1e9, 1e9 + 1)  # integers compare exactly, no relative tolerance
    assert numbers_equal(1e9 + 0.5, 1e9 + 0.75)  # non-integers keep the relative 1e-6
    assert not numbers_equal(18, 18.01)
    assert not numbers_equal(None, 0.0)


# ---------------------------------------------------------------- task basics
@pytest.fixture(scope="module")
def task():
    """The sandbox verdicts alone (grounding off: tests/test_gsm_grounding.py covers it)."""
    task = GSMTask(timeout_s=1.0, grounding=False)
    yield task
    task.close()


def test_registry_and_protocol(task):
    assert "gsm" in TASKS
    assert isinstance(task, Task)
    assert isinstance(make_task("gsm", num_examples=1), GSMTask)
    with pytest.raises(ValueError, match="num_exmaples"):
        make_task("gsm", num_exmaples=1)
    with pytest.raises(ValueError, match="unknown task .chess.; registered: arith"):
        make_task("chess")
    with pytest.raises(ValueError, match="already registered"):
        register_task("gsm", GSMTask)


def test_constructor_rejects_bad_values():
    with pytest.raises(ValueError, match="runs"):
        GSMTask(runs=0)
    with pytest.raises(ValueError, match="timeout_s"):
        GSMTask(timeout_s=0)


def test_bundled_examples_are_correct():
    examples = json.loads(EXAMPLES_PATH.read_text())["examples"]
    assert len(examples) >= 12
    for example in examples:
        result = run_program(example["program"])
        assert result.ok, (example, result)
        assert numbers_equal(program_answer(result.output), example["answer"]), example


def test_proposal_prompt_shape_and_determinism(task):
    messages = task.proposal_prompt(random.Random(3))
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages == task.proposal_prompt(random.Random(3))
    user = messages[1]["content"]
    assert user.count("Problem: ") == 3  # the format line + 2 examples
    assert user.count("```python") == 3
    assert len(user.split()) < 200  # short prompt: ~220 SmolLM2 tokens with the template
    zero = GSMTask(num_examples=0).proposal_prompt(random.Random(0))[1]["content"]
    assert "Examples" not in zero


def test_examples_round_trip_through_the_parser(task):
    for example in task.examples:
        text = format_proposal(example["problem"], example["program"])
        proposal = task.parse_proposal(text)
        assert proposal == Proposal(example["problem"], example["program"], text)


# ---------------------------------------------------------------- parsing proposals
GOOD = [
    "Problem: Ann has 3 cats and buys 2 more. How many cats?\n```python\nprint(3 + 2)\n```",
    "Ann has 3 cats and buys 2 more. How many cats?\n```\nprint(3 + 2)\n```\nThe answer is 5.",
    "**Problem:** Ann has 3 cats and buys 2 more. How many cats?\n\n**Program:**\n```py\nprint(3 + 2)\n```",
    "Sure! Here is one.\n\nProblem: Ann has 3 cats and buys 2 more. How many cats?\n```python\nprint(3 + 2)",
]
BAD = [
    "",
    "Problem: Ann has 3 cats and buys 2 more. How many cats?",  # no program
    "```python\nprint(5)\n```",  # no problem
    "Problem: cats?\n```python\nprint(5)\n```",  # too short
    "Problem: Ann has 3 cats. print(3 + 2)\n```python\nprint(3 + 2)\n```",  # code in problem
    "Problem: Ann has 3 cats and buys 2 more.\n```python\n\n```",  # empty program
]


@pytest.mark.parametrize("text", GOOD)
def test_parse_good_proposals(task, text):
    proposal = task.parse_proposal(text)
    assert proposal is not None
    assert proposal.problem == "Ann has 3 cats and buys 2 more. How many cats?"
    assert proposal.program == "print(3 + 2)"
    assert proposal.raw == text


@pytest.mark.parametrize("text", BAD)
def test_parse_bad_proposals(task, text):
    assert task.parse_proposal(text) is None


def test_parse_rejects_overlong_parts():
    task = GSMTask(max_problem_chars=50)
    long_problem = "Ann has " + "many " * 20 + "cats. How many?"
    assert task.parse_proposal(f"Problem: {long_problem}\n```python\nprint(1)\n```") is None


# ---------------------------------------------------------------- verification
def _proposal(program: str) -> Proposal:
    return Proposal("Ann has 3 cats and buys 2 more. How many cats?", program, "")


VERIFY_CASES = [
    ("cats = 3\nprint(cats + 2)", True, 5.0, "ok"),
    ("print('steps')\nprint(7 / 2)\n", True, 3.5, "ok"),
    ("print(f'{1234:,}')", True, 1234.0, "ok"),
    ("print(id(object()))", False, None, "nondeterministic"),
    ("print('five')", False, None, "not_numeric"),
    ("print(float('nan'))", False, None, "not_numeric"),
    ("pass", False, None, "not_numeric"),
    ("import random\nprint(random.randint(1, 9))", False, None, "banned"),
    ("print(1 / 0)", False, None, "error"),
    ("print(3 +)", False, None, "error"),
    ("while True:\n    pass", False, None, "timeout"),
    ("x = bytearray(10 ** 10)", False, None, "memory"),
    ("print('9' * 10 ** 6)", False, None, "output_limit"),
]


def test_verify_table(task):
    proposals = [_proposal(source) for source, *_ in VERIFY_CASES] + [None]
    verdicts = task.verify(proposals)
    assert len(verdicts) == len(proposals)
    for (source, valid, answer, reason), verdict in zip(VERIFY_CASES, verdicts):
        assert (verdict.valid, verdict.answer, verdict.reason) == (valid, answer, reason), source
        assert verdict.seconds >= 0.0
    assert (verdicts[-1].valid, verdicts[-1].reason) == (False, "parse")
    assert task.verify([]) == []


def test_task_pickles_without_its_pool(task):
    task.verify([_proposal("print(1)")])
    clone = pickle.loads(pickle.dumps(task))
    assert clone.verify([_proposal("print(2)")])[0].answer == 2.0
    clone.close()


# ---------------------------------------------------------------- student side
def test_solve_prompt(task):
    messages = task.solve_prompt("  What is 2 + 2?  ")
    assert messages[-1]["role"] == "user"
    assert messages[-1]["content"].startswith("What is 2 + 2?\n")
    assert "####" in messages[-1]["content"]


@pytest.mark.parametrize(
    ("completion", "grade"),
    [
        ("2 + 2 = 4\n#### 4", Grade("correct", 4.0)),
        ("#### 4.0000000001", Grade("wrong", 4.0000000001)),  # an integer answer compares exactly
        ("The answer is 5", Grade("wrong", 5.0)),
        ("I do not know.", Grade("format", None)),
    ],
)
def test_grade(task, completion, grade):
    assert task.grade(completion, 4.0) == grade


def test_grade_float_noise_in_the_reference(task):
    noisy = sum([0.1] * 40)  # a program's 4.000000000000002
    assert noisy != 4.0 and task.grade("#### 4", noisy) == Grade("correct", 4.0)
    assert task.grade("#### 4.5", noisy).label == "wrong"


def test_grade_require_marker():
    strict = GSMTask(require_marker=True)
    assert strict.grade("The answer is 4", 4.0) == Grade("format", None)
    assert strict.grade("so\n#### 4", 4.0) == Grade("correct", 4.0)


# ---------------------------------------------------------------- held-out data
@needs_gsm8k
def test_held_out_reads_gsm8k_test_in_file_order():
    task = GSMTask(eval_path=str(GSM8K / "test.jsonl"))
    items = task.held_out(5, random.Random(0))
    assert len(items) == 5 and all(isinstance(i, HeldOutItem) for i in items)
    assert items[0].question.startswith("Janet")
    assert items[0].answer == 18.0
    assert items == task.held_out(5, random.Random(1))
    assert len(task.held_out(10_000, random.Random(0))) == 1319


def test_held_out_missing_path_names_the_path(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        GSMTask(eval_path=str(missing)).held_out(3, random.Random(0))


def test_held_out_malformed_file(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "no marker"}\n')
    with pytest.raises(ValueError, match="####"):
        GSMTask(eval_path=str(bad)).held_out(3, random.Random(0))
    bad.write_text("not json\n")
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        GSMTask(eval_path=str(bad)).held_out(3, random.Random(0))


@needs_gsm8k
def test_train_examples_come_from_gsm8k_with_programs():
    task = GSMTask(train_path=str(GSM8K / "train.jsonl"), gsm8k_fraction=1.0, num_examples=2, grounding=False)
    text = task.proposal_prompt(random.Random(0))[1]["content"]
    assert "step1 = " in text
    sample = random.Random(0).sample(task._train, 20)
    verdicts = task.verify([Proposal(e["problem"], e["program"], "") for e in sample])
    assert all(v.valid for v in verdicts), verdicts
    task.close()


def test_structured_request_segments_and_simple_examples(task):
    from evolora.tasks.gsm.params import EXAMPLE_SETS
    from evolora.tasks.gsm.task import PROGRAM_FENCE

    structured = GSMTask(
        structured=True,
        forced_print=True,
        program_temperature=0.2,
        example_set="simple",
        problem_tokens=40,
        program_tokens=50,
    )
    request = structured.proposal_request(random.Random(0))
    assert request.prefix == "Problem:" and len(request.examples) == 2
    assert all(e in request.messages[-1]["content"] for e in request.examples)
    problem, body, printed = request.segments
    assert (problem.forced, problem.max_new_tokens, problem.keep_stop) == ("", 40, False)
    assert "\n\n" in problem.stop and "```" in problem.stop
    assert (body.forced, body.max_new_tokens, body.temperature) == (PROGRAM_FENCE, 50, 0.2)
    assert "print(" in body.stop and printed.forced == "print(" and printed.stop == ("\n",)
    assert GSMTask(structured=True).proposal_request(random.Random(0)).segments[1].stop == ("```",)
    assert task.proposal_request(random.Random(0)).segments == ()  # free-form by default
    # what a structured rollout writes parses, and every simple example verifies to its answer
    text = "Problem: Tom has 5 apples and buys 3. How many now?" + PROGRAM_FENCE + "a = 5\nb = 3\n" + "print(a + b)\n"
    proposal = structured.parse_proposal(text)
    assert proposal.program == "a = 5\nb = 3\nprint(a + b)"
    simple = json.loads(EXAMPLE_SETS["simple"].read_text())["examples"]
    try:
        verdicts = structured.verify([Proposal(e["problem"], e["program"], "") for e in simple])
    finally:
        structured.close()
    assert [v.answer for v in verdicts] == [float(e["answer"]) for e in simple]
    assert all(len(e["program"].splitlines()) <= 4 for e in simple)  # one or two steps
    with pytest.raises(ValueError, match="example_set"):
        GSMTask(example_set="hard")
    with pytest.raises(ValueError, match="program_temperature"):
        GSMTask(program_temperature=0)
