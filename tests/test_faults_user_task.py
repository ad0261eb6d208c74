"""Fault class "user code", tasks: a task of the user's own (``task.name: package.module:factory``) that
does not import, raises while it is built, or raises or breaks its contract in a method (a prompt that
is no list of messages, not one verdict per proposal, a grade that is no Grade) is reported in at most
3 lines naming ``task.name``, the task and the contract (exit 2): before any model loads when it
fails while built, and with the run resumable when it fails later; ``--verbose`` adds the traceback."""

from __future__ import annotations

import sys
import textwrap

import pytest
from run_helpers import TOY_ARGS
from typer.testing import CliRunner

from evolora.cli import app
from evolora.config import ConfigError, load_config
from evolora.io import read_jsonl
from evolora.tasks import TASKS, make_task
from evolora.tasks.user_task import CONTRACT
from evolora.user_code import UserCodeError

MODULE = "faulty_user_tasks"
SOURCE = textwrap.dedent("""
    from evolora.tasks.toy import ToyTask

    MODE = {"flaky": "raise"}


    def broken(**params):
        raise ZeroDivisionError("my task's setup")


    def not_a_task(**params):
        return {"name": "toy"}


    class GradesAsText(ToyTask):
        def grade(self, completion, answer):
            return "correct"


    class DropsAVerdict(ToyTask):
        def verify(self, proposals):
            return super().verify(proposals)[:-1]


    class StringPrompt(ToyTask):
        def solve_prompt(self, problem):
            return "solve " + problem


    class Flaky(ToyTask):
        def grade(self, completion, answer):
            if MODE["flaky"] == "raise":
                raise RuntimeError("not fixed yet")
            return super().grade(completion, answer)
""")
runner = CliRunner()


@pytest.fixture
def user_tasks(tmp_path, monkeypatch):
    """``faulty_user_tasks``, importable from the current folder as a user's module is."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    _forget()
    yield
    _forget()  # none left in the registry for other tests


def _forget() -> None:
    sys.modules.pop(MODULE, None)
    for name in [n for n in TASKS if n.startswith(f"{MODULE}:")]:
        TASKS.pop(name)


def test_a_task_that_fails_while_built_is_named_when_the_config_loads(user_tasks):
    with pytest.raises(ConfigError) as caught:
        load_config("tasks/gsm.yaml", [f"task.name={MODULE}:broken", "task.params={}"])
    message = str(caught.value)
    assert f"task.name '{MODULE}:broken' raised ZeroDivisionError: my task's setup while it was built" in message
    assert CONTRACT in message and len(message.splitlines()) <= 3
    with pytest.raises(ConfigError, match="returned a dict, not a Task"):
        load_config("tasks/gsm.yaml", [f"task.name={MODULE}:not_a_task", "task.params={}"])
    with pytest.raises(ConfigError, match="cannot import module 'no_such_tasks'"):
        load_config("tasks/gsm.yaml", ["task.name=no_such_tasks:Task", "task.params={}"])


@pytest.mark.parametrize(
    "name, call, problem",
    [
        ("GradesAsText", lambda task: task.grade("2", 2), "grade returned a str, not a Grade"),
        ("DropsAVerdict", lambda task: task.verify([None, None]), "verify returned 1 verdicts for 2 proposals"),
        ("StringPrompt", lambda task: task.solve_prompt("1+1"), "solve_prompt returned str 'solve 1+1', not a list"),
    ],
)
def test_a_task_method_breaking_its_contract_is_named(user_tasks, name, call, problem):
    task = make_task(f"{MODULE}:{name}")
    assert type(task).__name__ == name  # the class stays the user's
    with pytest.raises(UserCodeError) as caught:
        call(task)
    assert str(caught.value).startswith(f"task.name '{MODULE}:{name}' {problem}")
    assert str(caught.value).endswith(f"the contract: {CONTRACT}")


def test_a_good_user_task_runs_as_its_class_does(user_tasks):
    import faulty_user_tasks

    faulty_user_tasks.MODE["flaky"] = "ok"
    task = make_task(f"{MODULE}:Flaky")
    assert task.grade("4", 4) == make_task("toy").grade("4", 4)


def run_args(out, task: str) -> list[str]:
    return ["evolve", "tasks/gsm.yaml", "--out", str(out), *TOY_ARGS, "--set", f"task.name={task}", "--no-eval"]


def error_lines(output: str) -> list[str]:
    lines = output.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("error:"))
    return lines[start:]


def test_the_cli_names_a_failing_task_and_the_run_resumes_once_it_is_fixed(user_tasks, tmp_path, single_thread):
    import faulty_user_tasks

    out = tmp_path / "run"
    failed = runner.invoke(app, run_args(out, f"{MODULE}:Flaky"))
    assert failed.exit_code == 2, failed.output
    flat = " ".join(failed.output.split())
    assert "Traceback" not in failed.output and len(error_lines(failed.output)) <= 3, failed.output
    assert f"task.name '{MODULE}:Flaky' grade raised RuntimeError: not fixed yet" in flat
    assert f"evolora evolve --resume {out}" in flat
    verbose = runner.invoke(app, [*run_args(tmp_path / "verbose", f"{MODULE}:Flaky"), "--verbose"])
    assert verbose.exit_code == 2 and "Traceback" in verbose.output and len(error_lines(verbose.output)) <= 3
    faulty_user_tasks.MODE["flaky"] = "ok"
    resumed = runner.invoke(app, ["evolve", "--resume", str(out), "--no-eval"])
    assert resumed.exit_code == 0, resumed.output
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]


def test_evaluate_names_a_failing_task_and_keeps_the_run(user_tasks, tmp_path, single_thread):
    import faulty_user_tasks
    from run_helpers import tree_digest

    out = tmp_path / "run"
    faulty_user_tasks.MODE["flaky"] = "ok"
    finished = runner.invoke(app, run_args(out, f"{MODULE}:Flaky")[:-1])  # with its held-out evaluation
    assert finished.exit_code == 0, finished.output
    faulty_user_tasks.MODE["flaky"] = "raise"
    before = tree_digest(out)
    result = runner.invoke(app, ["evaluate", str(out), "--limit", "1"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert len(error_lines(result.output)) <= 3
    assert f"task.name '{MODULE}:Flaky' grade raised RuntimeError" in " ".join(result.output.split())
    assert tree_digest(out) == before
