"""A misspelled key, operator, task or parameter is refused with its close match named first."""

from __future__ import annotations

import doctest

import pytest

from evolora import spelling
from evolora.config import ConfigError, load_config


def test_doctests():
    assert doctest.testmod(spelling).failed == 0


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("evolution.selction=truncation", "evolution.selction: unknown key; did you mean 'selection'? evolution takes"),
        ("run.stepz=3", "run.stepz: unknown key; did you mean 'steps'? run takes steps"),
        ("evolution.selection=tournamnet", "unknown selection 'tournamnet'; did you mean 'tournament'? registered:"),
        (
            "evolution.mutation={name: lowrank_gaussian, params: {sigam: 1}}",
            "unknown parameter 'sigam'; did you mean 'sigma'?",
        ),
        ("task.name=arit", "unknown task 'arit'; did you mean 'arith'? registered:"),
        ("task.params.eval_digts=2", "['eval_digts']; did you mean 'eval_digits'? accepted:"),
    ],
)
def test_a_close_misspelling_names_the_fix(override, needle):
    with pytest.raises(ConfigError) as caught:
        load_config("arith", ["model.name=tiny-random", override])
    assert needle in str(caught.value)


def test_a_name_close_to_nothing_gets_the_list_alone():
    with pytest.raises(ConfigError) as caught:
        load_config("arith", ["run.zzzzzz=3"])
    assert "run.zzzzzz: unknown key; run takes steps" in str(caught.value)
    assert "did you mean" not in str(caught.value)
    assert spelling.did_you_mean("k", ["k", "replace"]) == "did you mean 'k'? "


def test_a_misspelled_preset_names_the_preset():
    with pytest.raises(ConfigError) as caught:
        load_config("arithh")
    assert "cannot read config arithh: No such file or directory; did you mean 'arith'? give a path" in str(
        caught.value
    )
