"""Roles as data (the population config's two forms, the game, the arms) and the League's one birth rule."""

from __future__ import annotations

import copy

import pytest
import torch
import yaml
from run_helpers import TINY_OVERRIDES

from evolora.bank.local import AdapterBank
from evolora.callbacks import JsonlLogger
from evolora.config import ConfigError, EvolutionConfig, config_from_dict, dump_config
from evolora.config.operator_choice import resolve_operators
from evolora.evolution import evolve
from evolora.game import ARMS, Game
from evolora.io import read_jsonl
from evolora.league import League
from evolora.learner import make_optimizer
from evolora.model import load_base
from evolora.population import Population
from evolora.run import Run


def _config(population: dict, **sections):
    data = copy.deepcopy(TINY_OVERRIDES)
    data["population"] = population
    data.update(sections)
    return config_from_dict(data)


def test_the_general_roles_form_equals_the_named_form_and_is_stored_named():
    general = _config({"roles": {"student": 3, "teacher": 2}})
    named = _config({"teachers": 2, "students": 3})
    assert general == named
    assert general.population.roles == {"teacher": 2, "student": 3}  # the game's order, not the file's
    assert (general.population.teachers, general.population.students) == (2, 3)
    assert general.role_sizes == {"teacher": 2, "student": 3}
    stored = yaml.safe_load(dump_config(general))["population"]
    assert stored["teachers"] == 2 and "roles" not in stored


@pytest.mark.parametrize(
    ("population", "words"),
    [
        ({"roles": {"teacher": 2, "student": 2}, "teachers": 2}, ["population.roles and population.teachers", "once"]),
        ({"roles": {"teacher": 2, "critic": 2}}, ["'student'", "teacher, student"]),
        ({"roles": {"teacher": 2, "student": 2, "judge": 2}}, ["population.roles.judge", "no game", "selfplay.plays"]),
        ({"roles": {"teacher": 2, "student": 2, "tutor": 2}}, ["'tutor' and 'teacher' share a first letter"]),
        ({"roles": {"teacher": 2, "student": 2, "agent": 1}}, ["'agent' cannot name a further role"]),
        ({"roles": {"teacher": 2, "student": 2, "Judge": 1}}, ["'Judge' cannot name a further role", "lowercase"]),
        ({"roles": {"teacher": 2, "student": 2, "critic": 0}}, ["population.roles.critic", "1 to 64"]),
        ({"roles": {"teacher": 2}}, ["'student'"]),
        ({"roles": {"teacher": 0, "student": 2}}, ["population.roles.teacher", "1 to 64"]),
        ({"roles": {"teacher": True, "student": 2}}, ["population.roles.teacher"]),
        ({"roles": [2, 2]}, ["map each role"]),
    ],
)
def test_bad_roles_are_refused_with_the_key_to_change(population, words):
    with pytest.raises(ConfigError) as caught:
        _config(population)
    assert all(word in str(caught.value) for word in words), str(caught.value)


def test_elitism_error_names_the_role_key_in_either_form():
    with pytest.raises(ConfigError, match="population.teachers"):
        _config({"roles": {"teacher": 1, "student": 2}})


def test_arms_are_data_and_the_single_agent_is_one_role_on_both_sides():
    single = _config({"teachers": 2, "students": 2}, selfplay={"mode": "single_agent"})
    assert single.arm is ARMS["single_agent"] and single.arm.game == Game(proposer="agent", solver="agent")
    assert single.role_sizes == {"agent": 1} and not single.arm.evolve
    assert ARMS["population"].game.roles == ("teacher", "student") and ARMS["single_agent"].game.roles == ("agent",)
    population = Population.initial(single.role_sizes)
    assert [(m.id, m.role, m.slot) for m in population.members] == [("a0", "agent", "A0")]
    proposers, solvers = population.players(single.arm.game)
    assert proposers == solvers == population.members


def test_population_ids_slots_and_roles_follow_the_declared_mapping():
    population = Population.initial({"teacher": 2, "student": 1, "critic": 2})
    assert [(m.id, m.slot) for m in population.members] == [
        ("t0", "T0"),
        ("t1", "T1"),
        ("s0", "S0"),
        ("c0", "C0"),
        ("c1", "C1"),
    ]
    assert population.roles == ["teacher", "student", "critic"]
    proposers, solvers = population.players(Game(proposer="student", solver="critic"))
    assert [m.id for m in proposers] == ["s0"] and [m.id for m in solvers] == ["c0", "c1"]
    with pytest.raises(ValueError, match="first letter"):
        Population.initial({"student": 1, "solver": 1})


@pytest.fixture
def league(tiny):
    model, _ = tiny
    population = Population.initial({"teacher": 3, "critic": 3})  # any role names: nothing is hard-coded
    bank = AdapterBank(model, [m.slot for m in population.members], rank=4, alpha=8, target_modules=("q_proj",))
    generator = torch.Generator().manual_seed(0)
    for m in population.members:
        bank.init_factors(m.slot, generator, b_std=0.1)
    new_optimizer = lambda slot: make_optimizer(bank.parameters(slot), lr=1e-2, weight_decay=0.0)  # noqa: E731
    return bank, League(population, new_optimizer)


def test_league_replace_is_the_one_birth_rule(league):
    bank, league = league
    old = league.population.by_id("c1")
    league.ratings.record_match("c1", "t0", 1.0)  # c1's rating moves away from the fresh one
    child = league.population.new_individual("critic", old.slot, parents=("c0",), operator="x", born_step=4)
    league.replace(old, child, 4)
    assert [m.id for m in league.population.role("critic")] == ["c0", "c3", "c2"]
    assert "c1" not in league.ratings and league.ratings.mu("c3") == pytest.approx(25.0)
    assert set(league.optimizers) == {"t0", "t1", "t2", "c0", "c3", "c2"}
    assert league.optimizers["c3"].param_groups[0]["params"][0] is bank.parameters(old.slot)[0]
    assert league.lineage[-1] == dict(child.to_dict(), step=4) and len(league.lineage) == 7


def test_league_evolve_equals_plain_evolve_and_enters_every_child(league, tiny):
    bank, league = league
    config = EvolutionConfig(gamma=0.34, elitism=1, crossover_rate=0.5)
    plain = Population.initial({"teacher": 3, "critic": 3})
    fitness = {m.id: league.ratings.conservative(m.id) for m in plain.members}
    snapshot = {slot: bank.get_factors(slot) for slot in bank.slots}
    expected = evolve(bank, plain, fitness, config, step=2, generator=torch.Generator().manual_seed(5))
    for slot, factors in snapshot.items():
        bank.set_factors(slot, factors)
    births = league.evolve(
        bank, config, step=2, generator=torch.Generator().manual_seed(5), operators=resolve_operators(config)
    )
    assert births == expected and {b.role for b in births} == {"teacher", "critic"}
    assert [m.id for m in league.population.members] == [m.id for m in plain.members]
    assert {b.child for b in births} <= set(league.optimizers) and not {b.replaced for b in births} & set(
        league.ratings.ids
    )
    assert [entry["id"] for entry in league.lineage[6:]] == [b.child for b in births]


def test_league_cull_replaces_with_a_mutated_copy_of_the_best_peer(league):
    bank, league = league
    league.ratings.record_match("c2", "t0", 1.0)  # c2 beats t0: the best critic
    bank.snapshot()  # every slot's last finite factors, the donor's among them
    victim = league.population.by_id("c0")
    event = league.cull(
        victim, bank, resolve_operators(EvolutionConfig()).mutation, step=3, generator=torch.Generator().manual_seed(1)
    )
    assert event == {"child": "c3", "donor": "c2"}
    child = league.population.by_id("c3")
    assert child.slot == victim.slot and child.parents == ("c2",) and child.born_step == 3
    assert league.lineage[-1]["step"] == 3 and "c0" not in league.optimizers


def test_the_roles_form_runs_the_same_records_as_the_named_form(toy_task, tmp_path, single_thread):
    records = {}
    for name, population in (
        ("named", {"teachers": 2, "students": 2}),
        ("roles", {"roles": {"teacher": 2, "student": 2}}),
    ):
        model, tokenizer = load_base("tiny-random")
        config = _config(population, run={"steps": 2, "seed": 0})
        Run(config, tmp_path / name, model=model, tokenizer=tokenizer, task=toy_task).train([JsonlLogger()])
        drop = lambda r: {k: v for k, v in r.items() if k not in ("seconds", "tokens_per_second", "peak_rss_mb")}  # noqa: E731
        records[name] = (
            [drop(r) for r in read_jsonl(tmp_path / name / "metrics.jsonl")],
            read_jsonl(tmp_path / name / "matches.jsonl"),
        )
    assert records["named"] == records["roles"] and len(records["named"][0]) == 2
    assert {b["role"] for r in records["roles"][0] for b in r["births"]} == {"teacher", "student"}
