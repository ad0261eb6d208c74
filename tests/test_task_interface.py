"""The declared Task base class: six abstract methods, every other hook with a default, and a
registry that refuses what is not a Task."""

from __future__ import annotations

import random

import pytest

from evolora.tasks import TASKS, make_task, register_task
from evolora.tasks.base import Grade, HeldOutItem, Proposal, ProposalRequest, Task, Verdict


class Minimal(Task):
    name = "minimal"

    def proposal_prompt(self, rng):
        return [{"role": "user", "content": f"say {rng.randint(0, 9)}"}]

    def parse_proposal(self, text):
        return Proposal(text, "", text) if text else None

    def verify(self, proposals):
        return [Verdict(p is not None, 1.0, "ok" if p else "parse") for p in proposals]

    def solve_prompt(self, problem):
        return [{"role": "user", "content": problem}]

    def grade(self, completion, answer):
        return Grade("correct" if completion.strip() == str(answer) else "wrong", None)

    def held_out(self, limit, rng):
        return [HeldOutItem("q", "7")][:limit]


def test_every_optional_hook_has_a_working_default():
    task = Minimal()
    request = task.proposal_request(random.Random(0))
    assert isinstance(request, ProposalRequest)
    assert request.messages == task.proposal_prompt(random.Random(0)) and request.prefix == ""
    item = HeldOutItem("what is 7?", "7")
    assert task.held_out_prompt(item) == task.solve_prompt("what is 7?")
    assert [g.label for g in task.grade_held_out(["7", "8"], [item, item])] == ["correct", "wrong"]
    assert task.close() is None
    assert (task.complexity_kind, task.proposal_prefix) == ("program", "")


def test_a_task_missing_an_abstract_method_cannot_be_built():
    class Incomplete(Task):
        def proposal_prompt(self, rng):
            return []

    with pytest.raises(TypeError, match="abstract"):
        Incomplete()


def test_the_registry_refuses_a_factory_that_returns_no_task():
    register_task("not-a-task-for-test", lambda: object())
    try:
        with pytest.raises(TypeError, match="subclass evolora.tasks.base.Task"):
            make_task("not-a-task-for-test")
    finally:
        TASKS.pop("not-a-task-for-test")


@pytest.mark.parametrize("name", ["gsm", "arith", "code", "toy"])
def test_every_shipped_task_is_a_task(name):
    task = make_task(name)
    assert isinstance(task, Task) and task.name == name and task.held_out_source
    task.close()
