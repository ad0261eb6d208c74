"""Learning-rate schedules: the values per step, bad input, and a run whose optimizers follow them."""

from __future__ import annotations

import copy
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from run_helpers import TINY_OVERRIDES

from evolora.config import ConfigError, config_from_dict
from evolora.model import load_base
from evolora.run import Run
from evolora.schedule import scheduled_lr


def test_cosine_runs_from_lr_to_its_final_fraction():
    lr, steps = 5e-4, 25
    assert scheduled_lr(lr, 1, steps, "cosine", 0.1) == pytest.approx(lr)
    assert scheduled_lr(lr, steps, steps, "cosine", 0.1) == pytest.approx(0.1 * lr)
    assert scheduled_lr(lr, 13, steps, "cosine", 0.1) == pytest.approx(lr * (0.1 + 0.9 * 0.5))  # halfway
    assert scheduled_lr(lr, 40, steps, "cosine", 0.1) == pytest.approx(0.1 * lr)  # an extended run stays down
    assert scheduled_lr(lr, 1, 1, "cosine", 0.1) == lr and scheduled_lr(lr, 7, steps) == lr


@settings(max_examples=50, deadline=None)
@given(steps=st.integers(1, 200), final=st.floats(0, 1))
def test_cosine_never_rises_and_stays_between_final_and_lr(steps, final):
    values = [scheduled_lr(1.0, s, steps, "cosine", final) for s in range(1, steps + 2)]
    assert all(b <= a + 1e-12 for a, b in zip(values, values[1:]))
    assert all(final - 1e-12 <= v <= 1.0 + 1e-12 for v in values)


def test_bad_schedule_input_is_refused():
    with pytest.raises(ValueError, match="unknown learning-rate schedule"):
        scheduled_lr(1e-3, 1, 10, "linear")
    with pytest.raises(ValueError, match=">= 1"):
        scheduled_lr(1e-3, 0, 10, "cosine")
    with pytest.raises(ValueError, match="fraction"):
        scheduled_lr(1e-3, 1, 10, "cosine", 1.5)
    with pytest.raises(ConfigError, match="lr_schedule"):
        config_from_dict({**TINY_OVERRIDES, "learner": {"lr_schedule": "step"}})


def test_every_optimizer_of_a_run_ends_at_the_scheduled_rate(toy_task, tmp_path):
    overrides = copy.deepcopy(TINY_OVERRIDES)
    overrides["learner"].update(lr_schedule="cosine", lr_final=0.25)
    config = config_from_dict(overrides)
    model, tokenizer = load_base("tiny-random")
    run = Run(config, tmp_path, model=model, tokenizer=tokenizer, task=toy_task)
    run.train([], steps=2)
    expected = 1e-2 * (0.25 + 0.75 * 0.5 * (1 + math.cos(math.pi / 3)))  # step 2 of 4
    trained = [m for m in run.population.members if m.born_step < 2]  # members that took step 2's update
    assert trained and all(run.optimizers[m.id].param_groups[0]["lr"] == pytest.approx(expected) for m in trained)
    assert expected < 1e-2
