"""The fitness choice: rating, dev-set validation, blend; the dev set never holds held-out items;
every evolution event records each member's fitness; the summary gives its rank correlation."""

from __future__ import annotations

import numpy as np
import pytest
from run_helpers import config_with

from evolora.config import ConfigError
from evolora.config.fitness import FitnessConfig
from evolora.fitness import member_fitness, pooled_rank_correlation, rank_correlation, split_half_agreement
from evolora.run import Run
from evolora.tasks import ArithTask
from evolora.tasks.gsm import GSMTask


def test_fitness_config_takes_a_bare_name_or_a_mapping():
    assert config_with().evolution.fitness == FitnessConfig(name="rating")
    assert config_with(evolution={"fitness": "validation"}).evolution.fitness.name == "validation"
    blend = config_with(evolution={"fitness": {"name": "blend", "weight": 0.25, "size": 12}}).evolution.fitness
    assert (blend.name, blend.weight, blend.size, blend.needs_dev_set) == ("blend", 0.25, 12, True)
    for bad in ("elo", {"name": "blend", "weight": 1.5}, {"name": "validation", "size": 0}):
        with pytest.raises(ConfigError, match="evolution.fitness"):
            config_with(evolution={"fitness": bad})


def test_arith_dev_set_is_disjoint_from_the_held_out_grid_at_any_size():
    task = ArithTask()
    dev = task.dev_set(90)
    assert len(dev) == 90 and len({i.question for i in dev}) == 90
    assert {i.group for i in dev} == {i.group for i in task.grid()}  # the same cells
    for per_cell in (10, 30, 100):
        grid = {i.question for i in ArithTask(eval_per_cell=per_cell).grid()}
        assert not grid & {i.question for i in dev}
    assert [i.question for i in task.dev_set(36)] == [i.question for i in dev[:36]]  # stable prefix
    assert task.dev_set(36) != ArithTask(eval_seed=1).dev_set(36)


def test_gsm_dev_set_is_a_train_slice_or_none(tmp_path):
    assert GSMTask().dev_set(8) is None  # only the test split ships
    path = tmp_path / "train.jsonl"
    path.write_text("".join(f'{{"question": "q{i}", "answer": "<<1+{i}={1 + i}>> #### {1 + i}"}}\n' for i in range(10)))
    dev = GSMTask(train_path=str(path)).dev_set(3)
    assert [(i.question, i.answer) for i in dev] == [("q7", 8.0), ("q8", 9.0), ("q9", 10.0)]


def test_member_fitness_rating_validation_and_blend():
    roles = {"t0": "teacher", "t1": "teacher", "s0": "student", "s1": "student"}
    signals = {"rating": {"t0": 2.0, "t1": 1.0, "s0": 5.0, "s1": 1.0}, "validation": {"s0": 0.1, "s1": 0.4}}
    assert member_fitness(FitnessConfig(), signals, roles) == signals["rating"]
    valid = member_fitness(FitnessConfig(name="validation"), signals, roles)
    assert valid == {"t0": 2.0, "t1": 1.0, "s0": 0.1, "s1": 0.4}  # teachers keep their rating
    half = member_fitness(FitnessConfig(name="blend", weight=0.5), signals, roles)
    assert half["s0"] == pytest.approx(0.0) and half["s1"] == pytest.approx(0.0)  # opposite z-scores cancel
    assert half["t0"] == pytest.approx(1.0) and half["t1"] == pytest.approx(-1.0)
    leaning = member_fitness(FitnessConfig(name="blend", weight=0.75), signals, roles)
    assert leaning["s1"] > leaning["s0"]
    with pytest.raises(ValueError, match="dev-set accuracy"):
        member_fitness(FitnessConfig(name="validation"), {"rating": signals["rating"]}, roles)


def test_rank_correlations():
    assert rank_correlation({"a": 1, "b": 2, "c": 3}, {"a": 0.1, "b": 0.2, "c": 0.3}) == pytest.approx(1.0)
    assert rank_correlation({"a": 1, "b": 2}, {"a": 0.1, "b": 0.2}) is None  # too few members
    runs = [
        ({"a": 1.0, "b": 2.0}, {"a": 0.1, "b": 0.3}),
        ({"a": 5.0, "b": 4.0}, {"a": 0.5, "b": 0.2}),
        ({"a": 0.0, "b": 1.0}, {"a": 0.4, "b": 0.3}),
    ]
    pooled = pooled_rank_correlation(runs)
    assert (pooled["members"], pooled["concordant"], pooled["discordant"], pooled["tied"]) == (6, 2, 1, 0)
    assert 0 < pooled["rho"] < 1


def test_validation_fitness_is_refused_without_a_dev_set(tmp_path):
    config = config_with(evolution={"fitness": "validation"}, task={"name": "toy", "params": {}})
    with pytest.raises(ValueError, match="has no dev set"):
        Run(config, tmp_path / "run")
    assert not (tmp_path / "run" / "config.yaml").exists()


def test_every_evolution_event_records_each_members_fitness(tmp_path, single_thread):
    config = config_with(
        evolution={"every": 2, "fitness": {"name": "validation", "size": 6}},
        task={"name": "arith", "params": {}},
        run={"steps": 3},
    )
    run = Run(config, tmp_path / "run")
    first, _ = run.run_step()
    assert "fitness" not in first  # no evolution event, no dev evaluation
    record, _ = run.run_step()
    members = record["fitness"]["members"]
    assert record["fitness"]["name"] == "validation" and set(members) == {"t0", "t1", "s0", "s1"}
    for member, entry in members.items():
        if entry["role"] == "student":
            assert 0 <= entry["validation"] <= 1 and entry["fitness"] == entry["validation"]
        else:
            assert entry["validation"] is None and entry["fitness"] == entry["rating"]
    summary = run.finish()
    for member, held in summary["held_out"].items():  # per-item correctness in the record
        assert len(held["items"]) == held["total"] and held["items"].count("1") == held["correct"]
    final = summary["fitness"]
    assert final["dev_size"] == 6 and set(final["rank_correlation"]) == {"rating", "validation", "fitness"}
    assert {m for m, e in final["members"].items() if e["validation"] is not None} == {
        m.id for m in run.population.role("student")
    }


def test_held_out_learning_curve_every_k_steps(tmp_path, single_thread):
    config = config_with(
        eval={"every": 2, "curve_limit": 3, "limit": 3},
        task={"name": "arith", "params": {}},
        evolution={"every": 10},
        run={"steps": 2},
    )
    run = Run(config, tmp_path / "run")
    first, _ = run.run_step()
    second, _ = run.run_step()
    assert "held_out_curve" not in first
    curve = second["held_out_curve"]
    assert set(curve) == {m.id for m in run.population.role("student")} and all(0 <= v <= 1 for v in curve.values())


def test_split_half_agreement_is_one_for_members_far_apart_and_undefined_for_twins():
    n = 40
    apart = {"a": np.ones(n), "b": np.arange(n) % 2, "c": np.zeros(n)}  # 100 %, 50 %, 0 % on any split
    result = split_half_agreement([apart, apart], size=20, generator=np.random.default_rng(0), splits=20)
    assert result["mean"] == result["low"] == result["high"] == 1.0 and result["splits"] == 20
    twins = {"a": np.arange(n) % 2, "b": np.arange(n) % 2}
    none = split_half_agreement([twins], size=20, generator=np.random.default_rng(0), splits=5)
    assert none["mean"] is None and none["splits"] == 0 and none["items"] == n


def test_split_half_agreement_refuses_bad_sizes_and_ragged_runs():
    run = {"a": np.ones(10), "b": np.zeros(10)}
    for size in (0, 10):
        with pytest.raises(ValueError, match=r"size must be in \[1, 9\]"):
            split_half_agreement([run], size=size, generator=np.random.default_rng(0))
    with pytest.raises(ValueError, match="same held-out items"):
        split_half_agreement([run, {"a": np.ones(9), "b": np.zeros(9)}], size=3, generator=np.random.default_rng(0))


def test_held_out_reliability_script_on_the_committed_population_size_records():
    from pathlib import Path

    from run_helpers import benchmark_module

    study = Path(__file__).resolve().parents[1] / "docs" / "results" / "data" / "study-popsize"
    result = benchmark_module("held_out_reliability").main(
        [str(study), "--arms", "size4", "--seeds", "0-1", "--sizes", "135", "--splits", "20"]
    )
    entry = result["size4"]
    assert entry["runs"] == 2 and entry["pairs"] == 12  # 4 students per run: 6 pairs each
    assert 0 < entry["differ_min"] <= entry["differ_mean"] <= entry["differ_max"] < 270
    assert entry["gap_max"] <= entry["differ_max"] and entry["split_135"]["items"] == 270
