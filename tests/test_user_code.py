"""One guard for every kind of a user's code (:mod:`evolora.user_code`): a task, an engine, an
operator and a play that raise each fail with one line naming the config key, the ``module:attr``,
the method and the exception, chained to it; evolora's own control flow goes through unchanged."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch

from evolora.config.operator_choice import guard_operator
from evolora.distributed.recovery import ClusterLost, WorkerLost
from evolora.generation.user_engine import guard_engine
from evolora.operators import OperatorSpec
from evolora.plays import PlaySpec
from evolora.tasks.user_task import guard_task
from evolora.user_code import UserCode, UserCodeError

MODULE = "raising_user_code"
SOURCE = textwrap.dedent("""
    from evolora.tasks.toy import ToyTask


    class Task(ToyTask):
        def grade(self, completion, answer):
            raise ZeroDivisionError("in grade")


    class Engine:
        def __init__(self, model, tokenizer, bank):
            pass

        def generate(self, prompts, adapters, sampling, **options):
            raise KeyError("in generate")

        def logprobs(self, names, samples):
            return None

        def refresh(self, slots):
            return None


    def mutation(parent, *, generator):
        raise ValueError("in mutation")


    def play(run, step, game):
        raise RuntimeError("in play")
""")


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """``raising_user_code``, importable as a user's module is."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(MODULE, None)
    import raising_user_code

    yield raising_user_code
    sys.modules.pop(MODULE, None)


def _task(module):
    guard_task(module.Task(), f"{MODULE}:Task").grade("4", 4)


def _engine(module):
    guard_engine(module.Engine, f"{MODULE}:Engine")(None, None, None).generate([[1]], ["A"], None)


def _operator(module):
    spec = guard_operator(OperatorSpec(f"{MODULE}:mutation", "mutation", module.mutation), "mutation")
    spec.fn({}, generator=torch.Generator())


def _play(module):
    PlaySpec(f"{MODULE}:play", f"{MODULE}:play").load()(None, None, None)


@pytest.mark.parametrize(
    ("call", "start", "cause"),
    [
        (_task, f"task.name '{MODULE}:Task' grade raised ZeroDivisionError: in grade", ZeroDivisionError),
        (_engine, f"generation.engine '{MODULE}:Engine' generate raised KeyError: 'in generate'", KeyError),
        (_operator, f"evolution.mutation '{MODULE}:mutation' raised ValueError: in mutation", ValueError),
        (_play, f"selfplay.plays '{MODULE}:play' raised RuntimeError: in play", RuntimeError),
    ],
)
def test_each_kind_of_user_code_that_raises_is_named_with_its_method(user_module, call, start, cause):
    with pytest.raises(UserCodeError) as caught:
        call(user_module)
    message = str(caught.value)
    assert message.startswith(start + "; the contract: ") and "\n" not in message and len(message) < 500
    assert type(caught.value.__cause__) is cause  # chained: --verbose shows the user's traceback


def test_the_guard_names_the_method_and_a_broken_result_and_keeps_a_good_one():
    code = UserCode("task.name", "my_pkg.tasks:Mine", "returns an int")
    doubled = code.guard(lambda x: 2 * x, "score", check=lambda r, a, k: None if r < 10 else f"returned {r}")
    assert doubled(3) == 6 and doubled.__evolora_guarded__
    with pytest.raises(UserCodeError, match=r"^task.name 'my_pkg.tasks:Mine' score returned 12; the contract: "):
        doubled(6)
    with pytest.raises(UserCodeError, match=r"'my_pkg.tasks:Mine' score raised TypeError: unsupported operand"):
        doubled(None)
    with pytest.raises(UserCodeError, match=r"'my_pkg.tasks:Mine' raised OSError: disk while it was built;"):
        with code.call(when="while it was built"):
            raise OSError("disk\nfull")


@pytest.mark.parametrize(
    "error",
    [WorkerLost("a Ray worker was lost"), ClusterLost("resume it"), UserCodeError("task.name", "t:T", "p", "c")],
)
def test_evolora_control_flow_and_named_errors_go_through_unchanged(error):
    code = UserCode("selfplay.plays", "my_pkg.plays:judge", "returns a Played")
    with pytest.raises(type(error)) as caught:
        with code.call():
            raise error
    assert caught.value is error  # not wrapped: the step's recovery (or the inner name) sees it


def test_keyboard_interrupt_is_not_the_users_failure():
    with pytest.raises(KeyboardInterrupt):
        with UserCode("selfplay.plays", "my_pkg.plays:judge", "returns a Played").call():
            raise KeyboardInterrupt
