"""The single-agent baseline (one adapter proposes and solves) and the hall of fame of frozen opponents."""

from __future__ import annotations

import pytest
import torch
from run_helpers import config_with

from evolora.callbacks import Checkpointer, JsonlLogger
from evolora.config import ConfigError
from evolora.io import read_jsonl
from evolora.model import load_base
from evolora.run import Run


def _run(config, task, out, steps=None):
    model, tokenizer = load_base("tiny-random")
    run = Run(config, out, model=model, tokenizer=tokenizer, task=task)
    run.train([JsonlLogger(), Checkpointer(1, config.run.steps)], steps=steps)
    return run


def _moving(rewards: list[float]) -> int:
    """How many rewards differ from their group mean (a non-zero GRPO advantage)."""
    mean = sum(rewards) / len(rewards)
    return sum(abs(r - mean) > 1e-9 for r in rewards)


def test_single_agent_proposes_and_solves_its_own_problems(toy_task, tmp_path, single_thread):
    config = config_with(selfplay={"mode": "single_agent"})
    run = _run(config, toy_task, tmp_path)
    assert [(m.id, m.role, m.slot) for m in run.population.members] == [("a0", "agent", "A0")]
    assert run.bank.slots == ["A0"]
    matches = read_jsonl(tmp_path / "matches.jsonl")
    assert len(matches) == 4 * 2  # steps x proposals_per_teacher (one proposer)
    assert {(m["teacher"], m["student"]) for m in matches} == {("a0", "a0")}
    records = read_jsonl(tmp_path / "metrics.jsonl")
    for record, step_matches in zip(records, (matches[i : i + 2] for i in range(0, 8, 2))):
        valid = [m for m in step_matches if m["valid"]]
        # the agent trains on its proposals (one group) and on n attempts per valid proposal
        # (a group each); GRPO drops samples whose advantage is 0
        groups = [[m["teacher_reward"] for m in step_matches]] + [m["student_rewards"] for m in valid]
        assert sum(len(g) for g in groups) == 2 + 3 * len(valid)
        assert record["trained_samples"] == {"a0": sum(_moving(g) for g in groups)}
        assert record["births"] == []  # no evolution with one individual
        assert record["match_outcomes"] == {}  # self-play is not rated
        assert record["reward"]["teacher"] == pytest.approx(sum(m["teacher_reward"] for m in step_matches) / 2)
        assert record["response_length"]["teacher"]["count"] == 2
        assert record["response_length"]["student"]["count"] == 3 * len(valid)
    assert run.ratings.mu("a0") == pytest.approx(25.0)
    summary = run.finish()
    assert summary["mode"] == "single_agent"
    assert set(summary["held_out"]) == {"a0", "base"}
    assert (tmp_path / "final" / "a0" / "adapter_config.json").exists()


def test_single_agent_ignores_population_checks():
    # one teacher with elitism 1 would fail in population mode; the baseline has no evolution
    with pytest.raises(ConfigError, match="elitism"):
        config_with(population={"teachers": 1})
    assert config_with(population={"teachers": 1}, selfplay={"mode": "single_agent"}).selfplay.mode == "single_agent"
    with pytest.raises(ConfigError, match="hall_of_fame"):
        config_with(selfplay={"mode": "single_agent", "matchmaking": {"hall_of_fame": 2}})
    with pytest.raises(ConfigError, match="mode"):
        config_with(selfplay={"mode": "solo"})


def test_hall_of_fame_snapshots_champions_and_serves_them_as_frozen_opponents(toy_task, tmp_path, single_thread):
    config = config_with(selfplay={"matchmaking": {"hall_of_fame": 2, "hall_prob": 1.0}})
    model, tokenizer = load_base("tiny-random")
    run = Run(config, tmp_path, model=model, tokenizer=tokenizer, task=toy_task)
    assert run.bank.slots[-2:] == ["H0", "H1"]
    record, games = run.run_step()  # evolve every step: the best student is enshrined after step 1
    assert all("@" not in g.student for g in games)  # the hall was empty during step 1
    (snapshot,) = run.hall.ids
    champion = max(run.population.role("student"), key=lambda m: run.ratings.conservative(m.id))
    assert snapshot == f"{champion.id}@1"
    frozen_factors = run.bank.get_factors("H0")
    assert all(torch.equal(frozen_factors[k][1], v[1]) for k, v in run.bank.get_factors(champion.slot).items())

    record, games = run.run_step()  # hall_prob 1: every teacher meets the frozen champion
    assert {g.student for g in games} == {snapshot}
    assert snapshot not in record["trained_samples"]  # frozen: never trained
    assert record["match_outcomes"] == {}  # hall games are not rated
    assert all(torch.equal(run.bank.get_factors("H0")[k][1], v[1]) for k, v in frozen_factors.items())
    assert run.hall.ids == [
        snapshot,
        f"{max(run.population.role('student'), key=lambda m: run.ratings.conservative(m.id)).id}@2",
    ]

    run.run_step()  # a third champion evicts the oldest and takes its slot
    assert len(run.hall) == 2 and snapshot not in run.hall.ids
    assert sorted(run.hall_slots.values()) == ["H0", "H1"]
    assert run.hall_slots[run.hall.ids[-1]] == "H0"


@pytest.mark.slow
def test_hall_of_fame_survives_resume(toy_task, tmp_path, single_thread):
    config = config_with(selfplay={"matchmaking": {"hall_of_fame": 2, "hall_prob": 0.5}})
    full = _run(config, toy_task, tmp_path / "full")
    _run(config, toy_task, tmp_path / "part", steps=2)
    model, tokenizer = load_base("tiny-random")
    resumed = Run(config, tmp_path / "part", model=model, tokenizer=tokenizer, task=toy_task)
    assert resumed.load_checkpoint() and resumed.hall.ids == [i for i in resumed.hall_slots]
    resumed.train([JsonlLogger(), Checkpointer(1, 4)])
    assert resumed.hall.ids == full.hall.ids and resumed.hall_slots == full.hall_slots
    drop = lambda r: {k: v for k, v in r.items() if k not in ("seconds", "tokens_per_second", "peak_rss_mb")}  # noqa: E731
    assert [drop(r) for r in read_jsonl(tmp_path / "full" / "metrics.jsonl")] == [
        drop(r) for r in read_jsonl(tmp_path / "part" / "metrics.jsonl")
    ]
    assert any("@" in m["student"] for m in read_jsonl(tmp_path / "full" / "matches.jsonl"))
