"""Each built-in task's settings are one frozen dataclass: built by name from YAML, checked when
built, and the same task whether given as an object or by field name."""

import dataclasses
import doctest

import pytest

import evolora.tasks.arith.params as arith_params
import evolora.tasks.code.params as code_params
import evolora.tasks.params as task_params_module
from evolora.tasks import (
    TASKS,
    ArithParams,
    ArithTask,
    CodeParams,
    CodeTask,
    GSMParams,
    GSMTask,
    ToyParams,
    ToyTask,
    make_task,
    register_task,
)
from evolora.tasks.params import params_signature, task_params

BUILT_IN = [(ArithTask, ArithParams), (GSMTask, GSMParams), (CodeTask, CodeParams), (ToyTask, ToyParams)]


@pytest.mark.parametrize(("task_type", "params_type"), BUILT_IN)
def test_a_task_holds_its_frozen_params(task_type, params_type):
    task = task_type()
    assert task.params == params_type() and task_type.params_type is params_type
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.params.max_problem_chars = 0
    assert TASKS[task_type.name] is task_type
    names = [field.name for field in dataclasses.fields(params_type)]
    assert list(params_signature(task_type).parameters) == names and len(names) >= 1


def test_an_object_and_names_build_the_same_task():
    by_object = ArithTask(ArithParams(eval_seed=1, eval_per_cell=2))
    by_name = make_task("arith", eval_seed=1, eval_per_cell=2)
    assert by_object.params == by_name.params and by_name.params.eval_seed == 1
    assert [i.question for i in by_object.held_out(18)] == [i.question for i in by_name.held_out(18)]
    replaced = ArithTask(ArithParams(eval_seed=1), eval_per_cell=3)
    assert (replaced.params.eval_seed, replaced.params.eval_per_cell) == (1, 3)
    assert GSMTask(GSMParams(runs=1), workers=1).limits["timeout_s"] == 2.0


@pytest.mark.parametrize("build", [lambda: make_task("code", runz=1), lambda: CodeTask(runz=1)])
def test_an_unknown_name_is_refused_with_the_accepted_ones(build):
    with pytest.raises(
        ValueError,
        match=r"task 'code' does not accept parameter\(s\) \['runz'\]; did you mean 'runs'\? accepted: .*'runs'",
    ):
        build()


def test_values_are_checked_when_the_params_are_built():
    with pytest.raises(ValueError, match="max_chars >= 3"):
        ArithParams(max_chars=2)
    with pytest.raises(ValueError, match="runs >= 1"):
        GSMParams(runs=0)
    with pytest.raises(FileNotFoundError, match="eval_path"):
        GSMParams(eval_path="/no/such/file.jsonl")
    with pytest.raises(ValueError, match="type_weights"):
        CodeParams(type_weights={"deduction": -1})
    with pytest.raises(ValueError, match="max_problem_chars >= 1"):
        make_task("toy", max_problem_chars=0)
    with pytest.raises(TypeError, match="takes a ArithParams, not GSMParams"):
        ArithTask(GSMParams())


def test_code_type_weights_fill_every_type():
    assert code_params.code_type_weights(None) == {"deduction": 1.0, "abduction": 1.0, "induction": 1.0}
    assert CodeTask(type_weights={"induction": 2}).type_weights == {
        "deduction": 0.0,
        "abduction": 0.0,
        "induction": 2.0,
    }


def test_task_params_without_settings_keeps_the_object():
    params = ArithParams(eval_seed=4)
    assert task_params(ArithParams, params, {}, "arith") is params


@pytest.mark.parametrize("module", [task_params_module, code_params, arith_params])
def test_doctests(module):
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0


def test_a_subclass_adds_its_own_names_to_the_settings():
    class Harder(ArithTask):
        def __init__(self, hard: bool = False, **settings):
            super().__init__(**settings)
            self.hard = hard

    assert list(params_signature(Harder).parameters)[:2] == ["hard", "num_examples"]
    register_task("arith-harder-for-test", Harder)
    try:
        task = make_task("arith-harder-for-test", hard=True, eval_seed=2)
        assert task.hard and task.params.eval_seed == 2
        with pytest.raises(ValueError, match=r"does not accept parameter\(s\) \['nope'\]; accepted: \['hard', "):
            make_task("arith-harder-for-test", nope=1)
    finally:
        del TASKS["arith-harder-for-test"]
