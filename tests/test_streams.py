"""Separate random streams: a change of selection operator changes only the parents chosen.

Two runs of one seed that differ only in ``evolution.selection`` play identical steps up to the
first evolution event, flip the same crossover coins and draw the same mutation noise there, and
seed every later rollout alike, while their parents differ."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from run_helpers import TINY_OVERRIDES

from evolora.bank.local import AdapterBank
from evolora.config import EvolutionConfig, OperatorChoice, config_from_dict
from evolora.config.operator_choice import resolve_operators
from evolora.evolution import evolve
from evolora.model import load_base
from evolora.population import Population
from evolora.run import Run
from evolora.streams import SELECTION, VARIATION, step_streams, stream_seed

TIMING = ("seconds", "tokens_per_second", "peak_rss_mb")


def _state(generator: torch.Generator) -> bytes:
    return bytes(generator.get_state().tolist())


def test_streams_are_a_pure_function_of_seed_and_step_and_differ_by_purpose():
    a, b = step_streams(3, 5), step_streams(3, 5)
    assert _state(a.selection) == _state(b.selection) and _state(a.variation) == _state(b.variation)
    assert a.proposals.random() == b.proposals.random() and a.matchmaking.random() == b.matchmaking.random()
    seeds = {stream_seed(s, t, k) for s in (0, 1) for t in (1, 2) for k in (SELECTION, VARIATION)}
    assert len(seeds) == 8 and all(0 <= x < 2**63 for x in seeds)
    draws = [torch.rand(4, generator=g) for g in (a.selection, a.variation, a.repair)]
    assert not torch.equal(draws[0], draws[1]) and not torch.equal(draws[1], draws[2])
    assert a.rollout_seed == step_streams(3, 5).rollout_seed != step_streams(3, 6).rollout_seed


def _recording(spec, calls: list):
    """``spec`` with a function that records the state of the generator it is handed, then runs."""

    def fn(*args, generator, **kwargs):
        calls.append((spec.name, _state(generator)))
        return spec.fn(*args, generator=generator, **kwargs)

    return dataclasses.replace(spec, fn=fn)


def _evolve_with(selection: str, *, separate: bool):
    """Evolve a 6 + 6 population once with ``selection``: (births, [(operator, variation-stream state)])."""
    model, _ = load_base("tiny-random")
    population = Population.initial({"teacher": 6, "student": 6})
    bank = AdapterBank(model, [m.slot for m in population.members], rank=4, alpha=8, target_modules=("q_proj",))
    init = torch.Generator().manual_seed(0)
    for m in population.members:
        bank.init_factors(m.slot, init, b_std=0.1)
    fitness = {m.id: float(i % 6) for i, m in enumerate(population.members)}
    config = EvolutionConfig(gamma=0.5, elitism=1, crossover_rate=0.5, selection=OperatorChoice(name=selection))
    ops = resolve_operators(config)
    calls: list = []
    ops = dataclasses.replace(
        ops,
        crossover=(_recording(ops.crossover[0], calls), ops.crossover[1]),
        mutation=(_recording(ops.mutation[0], calls), ops.mutation[1]),
    )
    streams = step_streams(0, 4)
    births = evolve(
        bank,
        population,
        fitness,
        config,
        step=4,
        generator=streams.variation,
        operators=ops,
        selection_generator=streams.selection if separate else None,
    )
    return births, calls


def test_a_selection_operator_changes_the_parents_and_not_the_variation_draws(single_thread):
    runs = {name: _evolve_with(name, separate=True) for name in ("tournament", "truncation", "rank")}
    (births, calls), others = runs["tournament"], [runs["truncation"], runs["rank"]]
    assert len(calls) == 6  # 3 children per role, one crossover or mutation each
    for other_births, other_calls in others:
        assert other_calls == calls  # the same coins, the same operators, the same noise draws
        assert [b.operator for b in other_births] == [b.operator for b in births]
        assert [b.parents for b in other_births] != [b.parents for b in births]
    # one shared generator (the former behaviour): the selection operator shifts the variation draws
    assert _evolve_with("truncation", separate=False)[1] != _evolve_with("tournament", separate=False)[1]


def _run(tmp_path, selection: str):
    """A 3-step tiny run of 4 + 4 (evolution at step 2) with ``selection``: (records, rollout RNG
    state at the start of each step's first rollout, {step: [(operator, variation state)]})."""
    data = {key: dict(value) for key, value in TINY_OVERRIDES.items()}
    data["population"] = {"teachers": 4, "students": 4}
    data["run"] = {"steps": 3, "seed": 1}
    # fresh child ratings: an inherited rating would carry the choice of parents into the ratings
    data["evolution"] = {**data["evolution"], "every": 2, "selection": {"name": selection}, "child_rating": "fresh"}
    run = Run(config_from_dict(data), tmp_path / selection)
    rollout_states, variation = {}, {}
    rollout = run.bank.rollout

    def first_rollout_state(*args, **kwargs):
        rollout_states.setdefault(run.step + 1, torch.get_rng_state())
        return rollout(*args, **kwargs)

    run.bank.rollout = first_rollout_state
    calls: list = []
    ops = run.operators
    run.operators = dataclasses.replace(
        ops,
        crossover=(_recording(ops.crossover[0], calls), ops.crossover[1]),
        mutation=(_recording(ops.mutation[0], calls), ops.mutation[1]),
    )
    records = []
    for _ in range(3):
        record, _ = run.run_step()
        records.append({k: v for k, v in record.items() if k not in TIMING})
        variation[record["step"]], calls[:] = list(calls), []
    return records, rollout_states, variation


def test_two_runs_differing_only_in_selection_differ_only_in_parents(tmp_path, single_thread):
    a, b = _run(tmp_path, "tournament"), _run(tmp_path, "truncation")
    (records_a, rollouts_a, variation_a), (records_b, rollouts_b, variation_b) = a, b
    assert records_a[0] == records_b[0]  # step 1: the same games, updates and ratings
    births_a, births_b = records_a[1]["births"], records_b[1]["births"]
    assert len(births_a) == 4 and [x["operator"] for x in births_a] == [x["operator"] for x in births_b]
    assert [x["parents"] for x in births_a] != [x["parents"] for x in births_b]  # the one difference

    def without_parents(r):  # the breeder's record is read off the parents
        return {**r, "births": [{**x, "parents": None} for x in r["births"]], "evolution": None}

    assert without_parents(records_a[1]) == without_parents(records_b[1])  # the rest of step 2 is the same
    assert variation_a[2] == variation_b[2] and len(variation_a[2]) == 4  # the same coins and noise draws
    assert variation_a[1] == variation_a[3] == [] == variation_b[1] == variation_b[3]
    for step in (1, 2, 3):  # every step's rollouts start from the same sampling state
        assert torch.equal(rollouts_a[step], rollouts_b[step])
    assert not torch.equal(rollouts_a[2], rollouts_a[3])


@pytest.mark.slow
def test_resume_after_an_evolution_event_replays_the_streams(tmp_path, single_thread):
    """A run resumed after an evolution event (no generator state saved) draws what the uninterrupted
    run drew: the same records and the same children."""
    from evolora.callbacks import Checkpointer, JsonlLogger
    from evolora.io import read_jsonl

    data = {key: dict(value) for key, value in TINY_OVERRIDES.items()}
    data["run"] = {"steps": 4, "seed": 2}
    data["evolution"] = {**data["evolution"], "every": 2, "selection": {"name": "rank"}}
    config = config_from_dict(data)
    full = Run(config, tmp_path / "full")
    full.train([JsonlLogger(), Checkpointer(1, 4)])
    part = Run(config, tmp_path / "part")
    part.train([JsonlLogger(), Checkpointer(1, 4)], steps=3)
    resumed = Run(config, tmp_path / "part")
    assert resumed.load_checkpoint() and resumed.step == 3
    resumed.train([JsonlLogger(), Checkpointer(1, 4)])
    drop = lambda r: {k: v for k, v in r.items() if k not in TIMING}  # noqa: E731
    assert [drop(r) for r in read_jsonl(tmp_path / "full" / "metrics.jsonl")] == [
        drop(r) for r in read_jsonl(tmp_path / "part" / "metrics.jsonl")
    ]
    for slot in full.bank.slots:
        fa, fb = full.bank.get_factors(slot), resumed.bank.get_factors(slot)
        assert all(torch.equal(fa[k][0], fb[k][0]) and torch.equal(fa[k][1], fb[k][1]) for k in fa)
