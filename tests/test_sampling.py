"""Parent sampling: stochastic universal sampling's counts, its exact spread, and the loop's use of it."""

from __future__ import annotations

import math

import pytest
import torch

from evolora.bank.local import AdapterBank
from evolora.config import EvolutionConfig, OperatorChoice
from evolora.evolution import evolve
from evolora.operators import independent_spread, selection_chances, universal, universal_spread
from evolora.population import Population

DISTRIBUTIONS = [
    [0.578125, 0.296875, 0.109375, 0.015625],  # tournament k = 3 over 4 members
    [0.5, 0.5, 0.0, 0.0],
    [0.1, 0.2, 0.3, 0.4],
    [1.0],
]


@pytest.mark.parametrize("chances", DISTRIBUTIONS)
@pytest.mark.parametrize("num", [1, 2, 3, 5, 8])
def test_each_member_is_drawn_floor_or_ceil_of_its_expected_count(chances, num):
    p = torch.tensor(chances, dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        picks = universal(p, num, generator=generator)
        assert picks.shape == (num,) and picks.dtype == torch.long
        counts = torch.bincount(picks, minlength=len(chances)).tolist()
        for count, share in zip(counts, chances):
            assert math.floor(num * share) <= count <= math.ceil(num * share)


def test_draws_are_unbiased_and_in_random_order():
    p = torch.tensor(DISTRIBUTIONS[0], dtype=torch.float64)
    generator = torch.Generator().manual_seed(1)
    draws = 10_000
    picks = torch.stack([universal(p, 3, generator=generator) for _ in range(draws)])  # (draws, 3)
    counts = torch.bincount(picks.flatten(), minlength=4).double()
    expected = 3 * draws * p
    assert torch.all((counts - expected).abs() <= 4 * expected.sqrt() + 1)
    first = torch.bincount(picks[:, 0], minlength=4).double()  # the first pick is one draw of p
    assert torch.all((first - draws * p).abs() <= 4 * (draws * p * (1 - p)).sqrt() + 1)


def _realised(p: torch.Tensor, x: torch.Tensor, num: int, draws: int, sample) -> torch.Tensor:
    generator = torch.Generator().manual_seed(2)
    return torch.tensor([float(x[sample(p, num, generator)].mean()) for _ in range(draws)], dtype=torch.float64)


def _independent(p, num, generator):
    return torch.multinomial(p, num, replacement=True, generator=generator)


def _universal(p, num, generator):
    return universal(p, num, generator=generator)


@pytest.mark.parametrize("num", [2, 3, 4])
@pytest.mark.parametrize(
    "name, sample, spread",
    [("independent", _independent, independent_spread), ("universal", _universal, universal_spread)],
)
def test_the_exact_spread_matches_the_draws(num, name, sample, spread):
    p = torch.tensor(DISTRIBUTIONS[0], dtype=torch.float64)
    x = torch.tensor([0.30, 0.10, 0.25, 0.05], dtype=torch.float64)  # held-out accuracy of each member
    realised = _realised(p, x, num, 10_000, sample)
    assert float(realised.mean()) == pytest.approx(float((p * x).sum()), abs=0.003)
    assert float(realised.std()) == pytest.approx(spread(p, x, num), rel=0.05)


def test_universal_sampling_narrows_the_spread():
    p = torch.tensor(DISTRIBUTIONS[0], dtype=torch.float64)
    x = torch.tensor([0.30, 0.10, 0.25, 0.05], dtype=torch.float64)
    for num in (2, 3, 4):
        assert universal_spread(p, x, num) < 0.8 * independent_spread(p, x, num)
    halves = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)  # 4·p whole: the picks never vary
    assert universal_spread(halves, torch.tensor([1.0, 0.0, 0.5]), 4) == pytest.approx(0.0, abs=1e-12)
    assert independent_spread(halves, torch.tensor([1.0, 0.0, 0.5]), 4) > 0.1


@pytest.mark.parametrize(
    "chances, num, message",
    [
        ([0.5, 0.4], 2, "sum to 1"),
        ([1.5, -0.5], 2, "≥ 0"),
        ([[1.0]], 1, "1-D"),
        ([0.5, 0.5], -1, "non-negative int"),
        ([0.5, 0.5], 1.0, "non-negative int"),
    ],
)
def test_bad_input_is_refused_by_name(chances, num, message):
    with pytest.raises(ValueError, match=message):
        universal(torch.tensor(chances, dtype=torch.float64), num, generator=torch.Generator())
    if num == 2:
        with pytest.raises(ValueError, match=message):
            universal_spread(torch.tensor(chances, dtype=torch.float64), torch.zeros(2), num)


def test_spread_refuses_values_of_another_shape():
    with pytest.raises(ValueError, match="chances' shape"):
        independent_spread(torch.tensor([0.5, 0.5]), torch.zeros(3), 2)


@pytest.fixture
def four(tiny):
    model, _ = tiny
    slots = [m.slot for m in Population.initial({"teacher": 4, "student": 4}).members]
    bank = AdapterBank(model, slots, rank=2, alpha=4, target_modules=("q_proj",))
    for slot in slots:
        bank.init_factors(slot, torch.Generator().manual_seed(0), b_std=0.1)
    fitness = {"t0": 4.0, "t1": 3.0, "t2": 2.0, "t3": 1.0, "s0": 4.0, "s1": 3.0, "s2": 2.0, "s3": 1.0}
    return bank, fitness


def _parents(bank, fitness, sampling: str, rate: float, seeds: int) -> list[tuple[str, ...]]:
    """Each seed's student parents of one event: truncation keeps the top half (chance ½ each)."""
    config = EvolutionConfig(
        gamma=0.5,
        crossover_rate=rate,
        sampling=sampling,
        selection=OperatorChoice(name="truncation", params={"fraction": 0.5}),
    )
    found = []
    for seed in range(seeds):
        population = Population.initial({"teacher": 4, "student": 4})
        births = evolve(bank, population, fitness, config, step=1, generator=torch.Generator().manual_seed(seed))
        found.append(tuple(p for b in births if b.role == "student" for p in b.parents))
    return found


def test_the_loop_deals_each_top_member_its_share(four):
    bank, fitness = four
    universal_parents = _parents(bank, fitness, "universal", 0.0, 20)  # 2 mutation children: 2 parents
    assert all(sorted(parents) == ["s0", "s1"] for parents in universal_parents)
    independent_parents = _parents(bank, fitness, "independent", 0.0, 20)
    assert any(len(set(parents)) == 1 for parents in independent_parents)  # one member twice, the other never
    crossover_parents = _parents(bank, fitness, "universal", 1.0, 10)  # 2 crossover children: 4 parents
    assert all(sorted(parents) == ["s0", "s0", "s1", "s1"] for parents in crossover_parents)


def test_universal_sampling_is_reproducible(four):
    bank, fitness = four
    config = EvolutionConfig(gamma=0.5, crossover_rate=0.5, sampling="universal")
    runs = []
    for _ in range(2):
        population = Population.initial({"teacher": 4, "student": 4})
        births = evolve(bank, population, fitness, config, step=1, generator=torch.Generator().manual_seed(5))
        runs.append([b.to_dict() for b in births])
    assert runs[0] == runs[1]


def test_universal_sampling_of_tournament_parents(four):
    bank, fitness = four
    config = EvolutionConfig(gamma=0.5, crossover_rate=0.0, sampling="universal")
    chances = selection_chances("tournament", torch.tensor([4.0, 3.0, 2.0, 1.0]))  # 2·p0 ≈ 1.16: once or twice
    for seed in range(20):
        population = Population.initial({"teacher": 4, "student": 4})
        births = evolve(bank, population, fitness, config, step=1, generator=torch.Generator().manual_seed(seed))
        parents = [p for b in births if b.role == "student" for p in b.parents]
        assert 1 <= parents.count("s0") <= 2 and parents.count("s3") <= math.ceil(2 * float(chances[3]))


def test_config_refuses_universal_sampling_without_exact_chances(tmp_path, monkeypatch):
    from run_helpers import config_with

    from evolora.cli.display import evolution_words
    from evolora.config import ConfigError

    (tmp_path / "mymod.py").write_text("def pick(fitness, num, *, generator):\n    return fitness.argsort()[:num]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ConfigError,
        match=r"evolution.selection: selection 'mymod:pick' has no exact chances here, and universal sampling",
    ):
        config_with(evolution={"sampling": "universal", "selection": "mymod:pick"})
    logprob = {"name": "exam", "score": "logprob"}
    with pytest.raises(ConfigError, match=r"evolution.roles.student.selection: .*lexicase's exact chances"):
        config_with(
            evolution={"sampling": "universal", "fitness": logprob, "roles": {"student": {"selection": "lexicase"}}}
        )
    exact = {"name": "lexicase", "params": {"epsilon": 0}}
    assert (
        config_with(evolution={"sampling": "universal", "fitness": logprob, "selection": exact}).evolution.sampling
        == "universal"
    )
    accuracy = config_with(evolution={"sampling": "universal", "fitness": "exam", "selection": "lexicase"})
    words = evolution_words(accuracy)
    assert words.startswith("evolving every 1 steps by selection lexicase, crossover svd_merge")
    assert words.endswith(", parents by universal sampling")
    loose = {"name": "lexicase", "params": {"epsilon": 1.0}}  # ε ≥ 1 ties every 0/1 outcome: no exact form
    with pytest.raises(ConfigError, match=r"evolution.selection: .*here ε = 1.0, score accuracy"):
        config_with(evolution={"sampling": "universal", "fitness": "exam", "selection": loose})
    # teachers sit no exam: their lexicase has the fitness as its one case, which is exact
    teachers = {"teacher": {"selection": "lexicase"}}
    assert config_with(evolution={"sampling": "universal", "fitness": logprob, "roles": teachers})
    students = {"student": {"selection": "tournament"}}
    assert config_with(evolution={"sampling": "universal", "fitness": logprob, "selection": loose, "roles": students})
    with pytest.raises(ConfigError, match="evolution.sampling"):
        config_with(evolution={"sampling": "stratified"})
