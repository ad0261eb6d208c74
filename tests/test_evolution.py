"""The evolution step: who is replaced, by what, with which lineage."""

from __future__ import annotations

import pytest
import torch

from evolora.bank.local import AdapterBank
from evolora.config import EvolutionConfig, OperatorChoice
from evolora.evolution import evolve
from evolora.operators.selection import num_replaced
from evolora.population import Population


@pytest.mark.parametrize(
    ("size", "gamma", "elitism", "expected"),
    [(4, 0.25, 1, 1), (4, 0.5, 1, 2), (2, 0.25, 1, 1), (2, 1.0, 1, 1), (8, 0.0, 1, 0), (3, 0.34, 0, 2)],
)
def test_num_replaced(size, gamma, elitism, expected):
    assert num_replaced(size, gamma, elitism) == expected


@pytest.fixture
def setup(tiny):
    model, _ = tiny
    population = Population.initial({"teacher": 3, "student": 3})
    bank = AdapterBank(model, [m.slot for m in population.members], rank=4, alpha=8, target_modules=("q_proj",))
    generator = torch.Generator().manual_seed(0)
    for m in population.members:
        bank.init_factors(m.slot, generator, b_std=0.1)
    fitness = {"t0": 3.0, "t1": 1.0, "t2": 2.0, "s0": -1.0, "s1": 5.0, "s2": 0.0}
    return bank, population, fitness


@pytest.mark.parametrize("rate, operator", [(1.0, "svd_merge"), (0.0, "lowrank_gaussian")])
def test_bottom_is_replaced_by_children_of_the_role(setup, rate, operator):
    bank, population, fitness = setup
    before = {m.slot: bank.get_factors(m.slot) for m in population.members}
    config = EvolutionConfig(gamma=0.3, elitism=1, crossover_rate=rate)
    births = evolve(bank, population, fitness, config, step=7, generator=torch.Generator().manual_seed(0))
    assert [(b.role, b.replaced, b.child, b.operator) for b in births] == [
        ("teacher", "t1", "t3", operator),
        ("student", "s0", "s3", operator),
    ]
    for birth in births:
        assert len(birth.parents) == (2 if rate == 1.0 else 1)
        assert all(p[0] == birth.role[0] for p in birth.parents)  # parents from the same role
        child = population.by_id(birth.child)
        assert child.born_step == 7 and child.slot == {"t1": "T1", "s0": "S0"}[birth.replaced]
        new = bank.get_factors(child.slot)
        assert not all(torch.equal(new[k][1], before[child.slot][k][1]) for k in new)
    survivors = {m.id for m in population.members}
    assert {"t0", "t2", "s1", "s2"} <= survivors and not {"t1", "s0"} & survivors


def test_same_generator_same_children(setup, tiny):
    bank, population, fitness = setup
    config = EvolutionConfig(gamma=0.3, crossover_rate=0.5)
    snapshot = {m.slot: bank.get_factors(m.slot) for m in population.members}
    evolve(bank, population, fitness, config, step=1, generator=torch.Generator().manual_seed(3))
    first = {slot: bank.get_factors(slot) for slot in snapshot}
    for slot, factors in snapshot.items():
        bank.set_factors(slot, factors)
    again = Population.initial({"teacher": 3, "student": 3})
    evolve(bank, again, fitness, config, step=1, generator=torch.Generator().manual_seed(3))
    for slot in snapshot:
        assert all(torch.equal(first[slot][k][0], bank.get_factors(slot)[k][0]) for k in first[slot])


def test_user_operator_from_module_path(setup):
    bank, population, fitness = setup
    config = EvolutionConfig(
        gamma=0.3,
        crossover_rate=0.0,
        mutation=OperatorChoice(name="evolora.operators.mutation:gaussian", params={"sigma": 0.5}),
    )
    births = evolve(bank, population, fitness, config, step=1, generator=torch.Generator().manual_seed(0))
    assert {b.operator for b in births} == {"evolora.operators.mutation:gaussian"}


@pytest.mark.parametrize("size", range(1, 11))
@pytest.mark.parametrize("gamma", [0.0, 0.1, 0.25, 0.3, 0.5, 0.7, 1.0])
@pytest.mark.parametrize("elitism", [0, 1, 2])
def test_one_replacement_rule_for_the_loop_and_the_registered_operator(size, gamma, elitism):
    import torch

    from evolora.operators.selection import pbt_truncation, replaced_indices

    fitness = torch.randperm(size, generator=torch.Generator().manual_seed(size)).double()
    replace, _ = pbt_truncation(fitness, generator=torch.Generator().manual_seed(0), gamma=gamma, elitism=elitism)
    assert replace.numel() == num_replaced(size, gamma, elitism)
    assert torch.equal(replace, replaced_indices(fitness, gamma, elitism))  # the loop's losers
    assert num_replaced(size, gamma, elitism) <= size - 1  # one member always survives
    if gamma == 0.3 and size == 10:
        assert num_replaced(size, gamma, elitism) == 3  # 0.3 * 10 = 3.0000000000000004 is still 3


def test_evolution_settings_are_checked_only_when_evolution_runs():
    from evolora.config import ConfigError, config_from_dict

    pair = {"model": {"name": "tiny-random"}, "population": {"teachers": 1, "students": 1}}
    with pytest.raises(ConfigError, match=r"protects every teacher \(1 in all\)"):
        config_from_dict(pair)  # elitism 1 of 1: an evolution that could never replace anyone
    assert config_from_dict({**pair, "evolution": {"enabled": False}}).role_sizes == {"teacher": 1, "student": 1}
