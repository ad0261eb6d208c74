"""Study arms: built-in and user arms resolve to overrides; ``no_evolution`` never calls an operator;
``random_reward`` trains on draws, not on the verifier's rewards."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from run_helpers import config_with

from evolora.advantages import compute_advantages
from evolora.config import ConfigError, config_from_dict
from evolora.config.operator_choice import LOOP_KINDS
from evolora.learner import Sample
from evolora.operators import OperatorSpec
from evolora.run import Run
from evolora.selfplay.reward_control import permute_rewards, randomize_rewards, reward_generator
from evolora.study import BUILTIN_ARMS, arm_overrides, parse_arms, study_plan


def test_builtin_and_user_arms_resolve_to_overrides():
    assert set(BUILTIN_ARMS) == {
        "population",
        "single_agent",
        "single_agent_total",
        "no_evolution",
        "independent_pairs",
        "random_reward",
    }
    assert arm_overrides("no_evolution", {}) == [
        'selfplay.mode="population"',
        "evolution.enabled=false",
        "study.arm=no_evolution",
    ]
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
    path.write_text(
        "model: {name: tiny-random}\ntask: {name: toy, params: {}}\n"
        "study: {arms: {rank_sel: {evolution.selection: {name: rank}}}}\n"
    )
    plan = study_plan(path, seeds=[3], arms=["no_evolution", "random_reward", "rank_sel"], out=tmp_path / "s")
    by_arm = {item.arm: item.config for item in plan}
    assert not by_arm["no_evolution"].evolution.enabled and by_arm["no_evolution"].learner.rewards == "real"
    assert by_arm["random_reward"].learner.rewards == "permuted" and by_arm["random_reward"].evolution.enabled
    assert by_arm["rank_sel"].evolution.selection.name == "rank"
    assert {c.study.arm for c in by_arm.values()} == {"no_evolution", "random_reward", "rank_sel"}
    assert [item.out.name for item in plan] == ["no_evolution-s3", "random_reward-s3", "rank_sel-s3"]
    assert all(c.run.seed == 3 and c.selfplay.mode == "population" for c in by_arm.values())


def _raising(spec: OperatorSpec) -> OperatorSpec:
    def refuse(*args, **kwargs):
        raise AssertionError(f"operator {spec.name} called in a no_evolution run")

    return dataclasses.replace(spec, fn=refuse)


def test_no_evolution_never_calls_an_operator(tmp_path, single_thread, monkeypatch):
    config = config_with(evolution={"every": 1, "enabled": False}, run={"steps": 3})
    run = Run(config, tmp_path / "run")
    ops = run.operators
    run.operators = type(ops)(**{k: (_raising(getattr(ops, k)[0]), getattr(ops, k)[1]) for k in LOOP_KINDS})
    members = [m.id for m in run.population.members]
    births = [run.run_step()[0]["births"] for _ in range(3)]
    assert births == [[], [], []] and [m.id for m in run.population.members] == members
    # the same run with evolution on does call them: the check above can fail
    evolving = Run(config_with(evolution={"every": 1}), tmp_path / "evo")
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


def test_gaussian_reward_run_trains_on_draws(tmp_path, single_thread, monkeypatch):
    run = Run(
        config_with(learner={"rewards": "random"}, evolution={"every": 10}, task={"name": "toy", "params": {}}),
        tmp_path / "run",
    )
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
    assert [item.config.evolution.selection.name for item in plan] == [
        "tournament",
        "truncation",
        "rank",
        "fitness_proportional",
    ]


def test_permute_rewards_keeps_every_groups_rewards_and_moves_them():
    samples = {
        "S0": _samples([1.0, -0.5, -0.5, -1.0], "problem0") + _samples([1.0, 1.0], "problem1"),
        "S1": _samples([-0.5, 1.0, -0.5, -0.5, 1.0, -1.0], "problem2"),
        "T0": _samples([0.0, -1.0, 0.5], "teacher:T0"),
        "H0": _samples([1.0, -0.5], "problem3"),
    }
    roles = {"S0": "student", "S1": "student", "T0": "teacher"}
    out = permute_rewards(samples, roles, reward_generator(0, 1))
    for member, batch in samples.items():
        for group in {s.group for s in batch}:
            assert sorted(s.reward for s in out[member] if s.group == group) == sorted(
                s.reward for s in batch if s.group == group
            )
    assert [s.reward for s in out["H0"]] == [1.0, -0.5]  # not a member: untouched
    moved = [m for m in ("S0", "S1", "T0") if [s.reward for s in out[m]] != [s.reward for s in samples[m]]]
    assert moved  # some rewards changed place
    assert [s.reward for s in samples["S0"]][:4] == [1.0, -0.5, -0.5, -1.0]  # the input is untouched


def _nonzero_advantages(jobs_or_samples) -> int:
    count = 0
    for batch in jobs_or_samples:
        if batch:
            advantages = compute_advantages(torch.tensor([s.reward for s in batch]), [s.group for s in batch])
            count += int((advantages != 0).sum())
    return count


def test_random_reward_arm_trains_on_as_many_samples_as_the_real_rewards(tmp_path, single_thread, monkeypatch):
    """A seeded tiny run: the permuted control gives exactly the real run's non-zero-advantage count
    (the Gaussian control does not), and the learner sees rewards in another order."""
    run = Run(
        config_with(
            learner={"rewards": "permuted"},
            evolution={"every": 10},
            task={"name": "toy", "params": {}},
            selfplay={"samples_per_problem": 4},
        ),
        tmp_path / "run",
    )
    seen: list[list] = []
    update = run.bank.update

    def spy(jobs, **kwargs):
        seen.extend(batch for _, batch in jobs.values())
        return update(jobs, **kwargs)

    monkeypatch.setattr(run.bank, "update", spy)
    permuted, real = [], []
    for _ in range(2):
        before = len(seen)
        record, games = run.run_step()
        permuted += seen[before:]
        assert sum(record["trained_samples"].values()) == _nonzero_advantages(seen[before:])
        assert record["rollouts"] >= sum(len(b) for b in seen[before:])
    import evolora.run.plays as run_module

    real_samples = []
    original = run_module.play_step

    def capture(*args, **kwargs):
        outcome = original(*args, **kwargs)
        real_samples.append(outcome.samples)
        return outcome

    monkeypatch.setattr(run_module, "play_step", capture)
    before = len(seen)
    record, _ = run.run_step()
    learner_view = seen[before:]
    real = [batch for batch in real_samples[0].values()]
    assert _nonzero_advantages(learner_view) == _nonzero_advantages(real) > 0
    assert sum(record["trained_samples"].values()) == _nonzero_advantages(real)
    assert [s.reward for b in learner_view for s in b] != [s.reward for b in real for s in b]
    gaussian = randomize_rewards(
        real_samples[0], {m.id: m.role for m in run.population.members}, reward_generator(0, 3)
    )
    assert _nonzero_advantages(gaussian.values()) > _nonzero_advantages(real)


def test_independent_pairs_never_cross_play_and_single_agent_total_matches_rollouts(tmp_path, single_thread):
    pairs = Run(
        config_with(
            selfplay={"matchmaking": {"scheme": "fixed_pairs"}},
            evolution={"enabled": False},
            task={"name": "toy", "params": {}},
        ),
        tmp_path / "pairs",
    )
    population = Run(config_with(task={"name": "toy", "params": {}}, evolution={"every": 10}), tmp_path / "pop")
    seen = set()
    for _ in range(3):
        record, _ = pairs.run_step()
        seen |= set(record["pair_solve_rates"])
    assert seen == {"t0|s0", "t1|s1"}
    base = config_with(task={"name": "toy", "params": {}})
    overrides = arm_overrides("single_agent_total", {}, base)
    assert "selfplay.proposals_per_teacher=4" in overrides  # 2 per teacher x 2 teachers
    from evolora.config import apply_overrides

    agent_config = config_from_dict(apply_overrides(base.model_dump(mode="json"), overrides))
    agent = Run(agent_config, tmp_path / "agent")
    agent_record, _ = agent.run_step()
    population_record, _ = population.run_step()
    assert agent_record["rollouts"] == population_record["rollouts"]
    with pytest.raises(ConfigError, match="single_agent_total"):
        arm_overrides("single_agent_total", {})


def _selection_study():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "selection_study.py"
    spec = importlib.util.spec_from_file_location("selection_study", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("fitness", ["rating", "validation"])
def test_the_4x4_selection_sweep_arms_differ_only_in_the_selection_key(tmp_path, fitness):
    sweep = _selection_study()
    overrides = [*sweep.study_overrides(fitness), "model.name=tiny-random", "run.steps=2"]
    plan = study_plan("tasks/arith.yaml", seeds=[4], arms=list(sweep.ARMS), out=tmp_path / "s", overrides=overrides)
    dumps = {item.arm: item.config.model_dump() for item in plan}
    assert {arm: d["evolution"]["selection"] for arm, d in dumps.items()} == {
        arm: {"name": name, "params": {}} for arm, name in sweep.ARMS.items()
    }
    rest = [
        {**d, "evolution": {**d["evolution"], "selection": None}, "study": {**d["study"], "arm": None}}
        for d in dumps.values()
    ]
    assert all(r == rest[0] for r in rest)  # nothing else differs between the arms of a seed
    config = plan[0].config
    assert (config.population.teachers, config.population.students, config.run.seed) == (4, 4, 4)
    assert config.selfplay.proposals_per_teacher * config.population.teachers == 8  # the size4 arm's rollouts
    assert (config.model.dtype, config.eval.limit, config.evolution.fitness.name) == ("float32", 270, fitness)
    args = sweep.study_args("0-5", "runs/x", fitness)
    assert args[:6] == ["study", "tasks/arith.yaml", "--arms", ",".join(sweep.ARMS), "--seeds", "0-5"]
    with pytest.raises(ValueError, match="rating or validation"):
        sweep.study_overrides("blend")
