"""Study arms: built-in and user arms resolve to overrides; ``no_evolution`` never calls an operator;
``random_reward`` trains on draws, not on the verifier's rewards."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from evolora.config import ConfigError, config_from_dict
from evolora.learner import Sample
from evolora.operators import OperatorSpec
from evolora.selfplay.reward_control import randomize_rewards, reward_generator
from evolora.run import Run
from evolora.study import BUILTIN_ARMS, arm_overrides, parse_arms, study_plan
from run_helpers import TINY_OVERRIDES


def _config(**sections):
    data = {key: dict(value) for key, value in TINY_OVERRIDES.items()}
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return config_from_dict(data)


def test_builtin_and_user_arms_resolve_to_overrides():
    assert set(BUILTIN_ARMS) == {"population", "single_agent", "no_evolution", "random_reward"}
    assert arm_overrides("no_evolution", {}) == ["selfplay.mode=\"population\"", "evolution.enabled=false",
                                                 "study.arm=no_evolution"]
    user = {"truncation": {"evolution.selection": {"name": "truncation"}}}
    assert arm_overrides("truncation", user) == ['evolution.selection={"name": "truncation"}', "study.arm=truncation"]
    with pytest.raises(ConfigError, match="unknown arm 'duel'"):
        arm_overrides("duel", user)
    with pytest.raises(ConfigError, match="built-in arm"):
        arm_overrides("population", {"population": {"run.steps": 3}})
    assert parse_arms("no_evolution, random_reward") == ["no_evolution", "random_reward"]
    for bad in ("", "a,a", "x-y"):
        with pytest.raises(ConfigError, match="--arms"):
            parse_arms(bad)


def test_study_plan_builds_each_arm_from_the_config(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: {name: tiny-random}\ntask: {name: toy, params: {}}\n"
                    "study: {arms: {rank_sel: {evolution.selection: {name: rank}}}}\n")
    plan = study_plan(path, seeds=[3], arms=["no_evolution", "random_reward", "rank_sel"], out=tmp_path / "s")
    by_arm = {item.arm: item.config for item in plan}
    assert not by_arm["no_evolution"].evolution.enabled and by_arm["no_evolution"].learner.rewards == "real"
    assert by_arm["random_reward"].learner.rewards == "random" and by_arm["random_reward"].evolution.enabled
    assert by_arm["rank_sel"].evolution.selection.name == "rank"
    assert {c.study.arm for c in by_arm.values()} == {"no_evolution", "random_reward", "rank_sel"}
    assert [item.out.name for item in plan] == ["no_evolution-s3", "random_reward-s3", "rank_sel-s3"]
    assert all(c.run.seed == 3 and c.selfplay.mode == "population" for c in by_arm.values())


def _raising(spec: OperatorSpec) -> OperatorSpec:
    def refuse(*args, **kwargs):
        raise AssertionError(f"operator {spec.name} called in a no_evolution run")

    return dataclasses.replace(spec, fn=refuse)


def test_no_evolution_never_calls_an_operator(tmp_path, single_thread, monkeypatch):
    config = _config(evolution={"every": 1, "enabled": False}, run={"steps": 3})
    run = Run(config, tmp_path / "run")
    ops = run.operators
    run.operators = type(ops)(**{k: (_raising(spec), params) for k, (spec, params) in vars(ops).items()})
    members = [m.id for m in run.population.members]
    births = [run.run_step()[0]["births"] for _ in range(3)]
    assert births == [[], [], []] and [m.id for m in run.population.members] == members
    # the same run with evolution on does call them: the check above can fail
    evolving = Run(_config(evolution={"every": 1}), tmp_path / "evo")
    evolving.operators = run.operators
    with pytest.raises(AssertionError, match="no_evolution run"):
        evolving.run_step()


def _samples(rewards: list[float], group: str) -> list[Sample]:
    return [Sample(prompt_ids=(1,), completion_ids=(2,), reward=r, group=group) for r in rewards]


def test_randomize_rewards_keeps_each_roles_mean_and_spread_but_not_the_values():
    real_t = [1.0, -0.5] * 2000
    real_s = [0.25] * 50
    samples = {"T0": _samples(real_t[:2000], "t"), "T1": _samples(real_t[2000:], "t"), "S0": _samples(real_s, "p")}
    roles = {"T0": "teacher", "T1": "teacher", "S0": "student"}
    out = randomize_rewards(samples, roles, reward_generator(0, 1))
    drawn = np.array([s.reward for m in ("T0", "T1") for s in out[m]])
    assert abs(drawn.mean() - 0.25) < 0.05 and abs(drawn.std() - 0.75) < 0.05
    assert len(set(drawn.round(6)) & {1.0, -0.5}) == 0  # draws, not the real values
    assert abs(np.corrcoef(drawn, real_t)[0, 1]) < 0.1  # and unrelated to them
    assert [s.reward for s in out["S0"]] == real_s  # a constant role keeps its constant
    assert [s.reward for s in samples["T0"]] == real_t[:2000]  # the input is untouched
    again = randomize_rewards(samples, roles, reward_generator(0, 1))
    assert [s.reward for s in again["T0"]] == [s.reward for s in out["T0"]]  # a function of (seed, step)
    other = randomize_rewards(samples, roles, reward_generator(0, 2))
    assert [s.reward for s in other["T0"]] != [s.reward for s in out["T0"]]


def test_random_reward_run_trains_on_draws(tmp_path, single_thread, monkeypatch):
    run = Run(_config(learner={"rewards": "random"}, evolution={"every": 10}, task={"name": "toy", "params": {}}),
              tmp_path / "run")
    seen, real = [], []
    update = run.bank.update

    def spy(jobs, **kwargs):
        seen.extend(s.reward for _, batch in jobs.values() for s in batch)
        return update(jobs, **kwargs)

    monkeypatch.setattr(run.bank, "update", spy)
    record, games = run.run_step()
    real = [g.teacher_reward for g in games] + [r for g in games for r in g.student_rewards]
    assert len(seen) == len(real) > 4
    assert sorted(seen) != sorted(real)  # the learner saw other rewards than the games earned
    assert not set(np.round(seen, 6)) <= set(np.round(real, 6))


def test_the_shipped_selection_sweep_arms_resolve(tmp_path):
    arms = ["population", "truncation", "rank_selection", "fitness_proportional"]
    plan = study_plan("tasks/arith.yaml", seeds=[0], arms=arms, out=tmp_path / "sweep")
    assert [item.config.evolution.selection.name for item in plan] == ["tournament", "truncation", "rank",
                                                                        "fitness_proportional"]
