"""A whole tiny evolution on a random tiny model: self-play, RL updates, ratings, evolution, resume."""

from __future__ import annotations

import json
import math

import pytest
import torch
from peft import PeftModel

from evolora.callbacks import Checkpointer, JsonlLogger
from evolora.io import read_jsonl
from evolora.model import load_base
from evolora.run import Run
from evolora.run.step import repair_faults


def _run(tiny_config, toy_task, out, steps=None, callbacks=None):
    model, tokenizer = load_base("tiny-random")
    run = Run(tiny_config, out, model=model, tokenizer=tokenizer, task=toy_task)
    run.train(
        callbacks if callbacks is not None else [JsonlLogger(), Checkpointer(1, tiny_config.run.steps)], steps=steps
    )
    return run


@pytest.mark.slow
def test_tiny_evolution_end_to_end(tiny_config, toy_task, tmp_path):
    run = _run(tiny_config, toy_task, tmp_path)
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert all(r["validity_rate"] > 0 for r in records)
    # every adapter that had non-constant rewards trained
    assert any(r["loss"] for r in records)
    births = [b for r in records for b in r["births"]]
    assert len(births) == 6  # 3 evolutions (none at the last step) x 2 roles x ceil(0.5 * 2)
    assert records[-1]["births"] == [] and records[-2]["births"]
    operators = {b["operator"] for b in births}
    assert "svd_merge" in operators and "lowrank_gaussian" in operators
    assert {b["role"] for b in births} == {"teacher", "student"}
    # children live in the replaced slots and carry lineage
    ids = {m.id for m in run.population.members}
    assert all(b["child"] in ids or b["child"] in {x["replaced"] for x in births} for b in births)
    matches = read_jsonl(tmp_path / "matches.jsonl")
    assert len(matches) == 4 * 2 * 2  # steps x teachers x proposals
    summary = run.finish()
    assert set(summary["held_out"]) == {"base"} | {m.id for m in run.population.role("student")}
    assert summary["held_out_source"] == run.task.held_out_source and "toy" in summary["held_out_source"]
    for member in run.population.members:
        path = tmp_path / "final" / member.id
        base, _ = load_base("tiny-random")
        loaded = PeftModel.from_pretrained(base, path)
        a_loaded = next(p for n, p in loaded.named_parameters() if "lora_A" in n)
        factors = run.bank.get_factors(member.slot)
        first_module = next(iter(factors))
        assert torch.allclose(a_loaded, factors[first_module][0])
    assert json.loads((tmp_path / "final" / "summary.json").read_text())["steps"] == 4


@pytest.mark.slow
def test_evolution_at_the_last_step_only_when_asked(tiny_config, toy_task, tmp_path):
    config = tiny_config.model_copy(
        update={"evolution": tiny_config.evolution.model_copy(update={"at_last_step": True})}
    )
    _run(config, toy_task, tmp_path)
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [len(r["births"]) for r in records] == [2, 2, 2, 2]


def test_training_changes_adapters_and_not_the_base(tiny_config, toy_task, tmp_path):
    model, tokenizer = load_base("tiny-random")
    base_before = {n: p.clone() for n, p in model.named_parameters()}
    run = Run(tiny_config, tmp_path, model=model, tokenizer=tokenizer, task=toy_task)
    before = {m.slot: run.bank.get_factors(m.slot) for m in run.population.members}
    run.train([], steps=1)
    changed = [
        slot
        for slot, f in before.items()
        if any(not torch.equal(f[k][1], v[1]) for k, v in run.bank.get_factors(slot).items())
    ]
    assert changed, "no adapter changed after an RL step"
    for name, param in run.bank.model.base_model.model.named_parameters():
        if "lora_" not in name:
            assert torch.equal(param, base_before[name.replace(".base_layer", "")])


@pytest.mark.slow
def test_resume_reproduces_uninterrupted_run(tiny_config, toy_task, tmp_path):
    full = _run(tiny_config, toy_task, tmp_path / "full")
    part = _run(tiny_config, toy_task, tmp_path / "part", steps=2)
    del part
    model, tokenizer = load_base("tiny-random")
    resumed = Run(tiny_config, tmp_path / "part", model=model, tokenizer=tokenizer, task=toy_task)
    assert resumed.load_checkpoint()
    assert resumed.step == 2
    resumed.train([JsonlLogger(), Checkpointer(1, 4)])
    a = read_jsonl(tmp_path / "full" / "metrics.jsonl")
    b = read_jsonl(tmp_path / "part" / "metrics.jsonl")
    drop = lambda r: {k: v for k, v in r.items() if k not in ("seconds", "tokens_per_second", "peak_rss_mb")}  # noqa: E731
    assert [drop(r) for r in a] == [drop(r) for r in b]
    for slot in full.bank.slots:
        fa, fb = full.bank.get_factors(slot), resumed.bank.get_factors(slot)
        assert all(torch.allclose(fa[k][1], fb[k][1]) for k in fa)


def _poison_after_step(step_to_poison: int):
    def callback(run, record, games):
        if run.step == step_to_poison:
            slot = run.population.role("student")[0].slot
            layer = next(iter(run.bank.layers.values()))
            with torch.no_grad():
                layer.lora_B[slot].weight[0, 0] = float("nan")

    return callback


def test_nan_in_factors_is_rolled_back_and_the_run_completes(tiny_config, toy_task, tmp_path):
    records = []
    run = _run(
        tiny_config,
        toy_task,
        tmp_path,
        callbacks=[_poison_after_step(2), lambda run, record, games: records.append(record)],
    )
    assert run.step == 4
    assert [f["action"] for f in records[2]["faults"]] == ["rollback"]  # repaired at the start of step 3
    assert records[3]["faults"] == []
    for slot in run.bank.slots:
        assert all(torch.isfinite(a).all() and torch.isfinite(b).all() for a, b in run.bank.get_factors(slot).values())


def test_nan_rollback_restores_last_finite_factors(tiny_config, toy_task, tmp_path):
    model, tokenizer = load_base("tiny-random")
    run = Run(tiny_config, tmp_path, model=model, tokenizer=tokenizer, task=toy_task)
    run.train([], steps=1)
    victim = run.population.role("teacher")[0]
    good = run.bank.get_factors(victim.slot)
    layer = next(iter(run.bank.layers.values()))
    with torch.no_grad():
        layer.lora_A[victim.slot].weight.fill_(float("inf"))
    events = repair_faults(run, "before_step", torch.Generator().manual_seed(0))
    assert events == [{"id": victim.id, "where": "before_step", "action": "rollback"}]
    restored = run.bank.get_factors(victim.slot)
    assert all(torch.equal(restored[k][0], good[k][0]) for k in good)


def test_nan_cull_replaces_the_individual(tiny_config, toy_task, tmp_path):
    config = tiny_config.model_copy(
        update={  # evolution off: the step's own event could replace the child
            "learner": tiny_config.learner.model_copy(update={"on_nonfinite": "cull"}),
            "evolution": tiny_config.evolution.model_copy(update={"enabled": False}),
        }
    )
    model, tokenizer = load_base("tiny-random")
    run = Run(config, tmp_path, model=model, tokenizer=tokenizer, task=toy_task)
    run.train([], steps=1)
    victim = run.population.role("student")[1]
    layer = next(iter(run.bank.layers.values()))
    with torch.no_grad():
        layer.lora_B[victim.slot].weight[0, 0] = float("nan")
    record, _ = run.run_step()
    (event,) = record["faults"]
    assert event["action"] == "cull" and event["id"] == victim.id
    assert victim.id not in {m.id for m in run.population.members}
    assert event["child"] in {m.id for m in run.population.members}


def test_step_records_carry_arms_race_metrics(tiny_config, toy_task, tmp_path):
    _run(tiny_config, toy_task, tmp_path, steps=2)
    records = read_jsonl(tmp_path / "metrics.jsonl")
    last = records[-1]
    assert last["coverage"] >= records[0]["coverage"] >= 1  # distinct valid problems seen so far
    games = read_jsonl(tmp_path / "matches.jsonl")
    step2 = [g for g in games if g["step"] == 2]
    assert set(last["matchup"]) == {g["teacher"] for g in step2}
    for teacher, row in last["matchup"].items():
        for student, rate in row.items():
            grades = [x for g in step2 if g["teacher"] == teacher and g["student"] == student for x in g["grades"]]
            assert rate == pytest.approx(sum(x == "correct" for x in grades) / len(grades))
    trained = [i for i, n in last["trained_samples"].items() if n]
    assert trained and all(0 < last["entropy"][i] < math.log(128) for i in trained)  # nats, vocab 128
    assert last["response_length"]["teacher"]["count"] == 4


def test_nonfinite_rewards_are_a_recorded_fault_and_not_trained_on(tiny_config, toy_task, tmp_path, monkeypatch):
    import evolora.selfplay as selfplay

    monkeypatch.setattr(selfplay, "student_reward", lambda label, rewards: math.nan)
    model, tokenizer = load_base("tiny-random")
    run = Run(tiny_config, tmp_path, model=model, tokenizer=tokenizer, task=toy_task)
    students = [m.id for m in run.population.role("student")]
    record, games = run.run_step()
    attempts = {s: sum(len(g.attempts) for g in games if g.student == s) for s in students}
    faults = [f for f in record["faults"] if f["where"] == "reward"]
    assert faults == [
        {"id": s, "where": "reward", "action": "dropped", "samples": attempts[s]} for s in students if attempts[s]
    ]
    assert faults and all(record["trained_samples"][s] == 0 for s in students)
