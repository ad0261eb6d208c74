"""Lexicase selection: its draw frequencies against an exact enumeration of case orders, its
automatic ε, its errors, and the outer loop handing it the exam's member × problem outcomes."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
import torch

from evolora.bank.local import AdapterBank
from evolora.config import EvolutionConfig, OperatorChoice
from evolora.event import exam_cases
from evolora.evolution import evolve
from evolora.operators import REGISTRY, case_epsilon, lexicase
from evolora.population import Population


def _exact(table: list[list[float]], epsilon: list[float]) -> list[Fraction]:
    """P(member i is drawn) by enumerating every case order (an independent, slow reference)."""
    members, cases = len(table), len(table[0])
    chances = [Fraction(0)] * members
    orders = list(itertools.permutations(range(cases)))
    for order in orders:
        alive = list(range(members))
        for case in order:
            best = max(table[i][case] for i in alive)
            alive = [i for i in alive if table[i][case] >= best - epsilon[case]]
            if len(alive) == 1:
                break
        for i in alive:
            chances[i] += Fraction(1, len(alive) * len(orders))
    return chances


TABLES = [
    [[1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 0, 1], [1, 1, 1, 0]],  # two specialists, two dominated
    [[1, 0, 1], [1, 0, 1], [0, 1, 0]],  # an exact tie: the two twins share their share
    [[0.9, 0.1, 0.5, 0.3], [0.2, 0.8, 0.5, 0.35], [0.5, 0.5, 0.6, 0.1], [0.1, 0.2, 0.3, 0.9]],  # continuous
]


@pytest.mark.parametrize("table", TABLES)
@pytest.mark.parametrize("epsilon", [0.0, None])
def test_draw_frequencies_match_the_exact_enumeration_of_case_orders(table, epsilon):
    cases = torch.tensor(table, dtype=torch.float64)
    tolerance = case_epsilon(cases).tolist() if epsilon is None else [epsilon] * cases.shape[1]
    exact = [float(p) for p in _exact(table, tolerance)]
    draws = 20_000
    picked = lexicase(
        cases.mean(dim=1), draws, generator=torch.Generator().manual_seed(7), cases=cases, epsilon=epsilon
    )
    counts = torch.bincount(picked, minlength=len(table)).tolist()
    for count, p in zip(counts, exact):
        spread = 4 * math.sqrt(draws * p * (1 - p)) + 1  # four standard deviations of a binomial count
        assert abs(count - draws * p) <= spread, (counts, exact)
    if table is TABLES[0]:
        assert exact == [0.0, pytest.approx(1 / 3), 0.0, pytest.approx(2 / 3)]  # dominated members never breed


def test_a_specialist_breeds_where_a_fitness_vector_ranks_it_last():
    # Member 2 alone solves the last problem and fails the rest; by accuracy it ranks last.
    cases = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 1]], dtype=torch.float64)
    picked = lexicase(cases.mean(dim=1), 4000, generator=torch.Generator().manual_seed(0), cases=cases)
    share = (picked == 2).double().mean().item()
    assert share == pytest.approx(0.25, abs=0.03)  # the one case it wins comes first a quarter of the time
    assert (picked == 1).sum().item() == 0  # member 0 beats member 1 on every case


def test_without_cases_the_fitness_is_the_only_case():
    fitness = torch.tensor([0.1, 0.7, 0.7, 0.2], dtype=torch.float64)
    plain = lexicase(fitness, 2000, generator=torch.Generator().manual_seed(0), epsilon=0.0)
    assert set(plain.tolist()) == {1, 2}  # the best, ties at random
    assert (plain == 1).double().mean().item() == pytest.approx(0.5, abs=0.05)
    loose = lexicase(fitness, 2000, generator=torch.Generator().manual_seed(0), epsilon=0.6)
    assert set(loose.tolist()) == {0, 1, 2, 3}  # everyone within 0.6 of the best stays


def test_automatic_epsilon_is_each_cases_median_absolute_deviation():
    cases = torch.tensor([[0, 1.0], [1, 2.0], [1, 3.0], [0, 10.0]], dtype=torch.float64)
    # case 0: median 0.5, deviations all 0.5; case 1: median 2.5, deviations 1.5, 0.5, 0.5, 7.5 -> 1.0
    assert case_epsilon(cases).tolist() == [0.5, 1.0]


def test_same_generator_same_parents_and_indices_on_the_fitness_device():
    cases = torch.tensor(TABLES[2], dtype=torch.float64)
    first = lexicase(cases.mean(dim=1), 50, generator=torch.Generator().manual_seed(5), cases=cases)
    again = lexicase(cases.mean(dim=1), 50, generator=torch.Generator().manual_seed(5), cases=cases)
    assert torch.equal(first, again) and first.dtype == torch.long and first.shape == (50,)
    assert lexicase(cases.mean(dim=1), 0, generator=torch.Generator(), cases=cases).shape == (0,)


@pytest.mark.parametrize(
    ("cases", "epsilon", "match"),
    [
        (torch.zeros(3, 4), None, "P = 4 members"),
        (torch.zeros(4, 0), None, "N ≥ 1"),
        (torch.tensor([[0.0], [float("nan")], [1.0], [1.0]]), None, "NaN"),
        (torch.zeros(4, 2), -0.1, "epsilon must be a number ≥ 0"),
        (torch.zeros(4, 2), "0.1", "epsilon must be a number ≥ 0"),
        (torch.zeros(4, 2), torch.zeros(2), "epsilon must be a number ≥ 0"),
    ],
)
def test_bad_cases_are_named(cases, epsilon, match):
    with pytest.raises(ValueError, match=match):
        lexicase(torch.zeros(4), 1, generator=torch.Generator(), cases=cases, epsilon=epsilon)


def test_cases_are_passed_by_the_loop_not_set_in_the_config():
    spec = REGISTRY.get("selection", "lexicase")
    assert spec.takes_cases and not REGISTRY.get("selection", "tournament").takes_cases
    assert REGISTRY.validate("selection", "lexicase", {}) == {"epsilon": None}
    with pytest.raises(ValueError, match="unknown parameter 'cases'"):
        REGISTRY.validate("selection", "lexicase", {"cases": [[1.0]]})
    with pytest.raises(ValueError, match="out of range"):
        REGISTRY.validate("selection", "lexicase", {"epsilon": -1.0})


def test_exam_cases_follow_the_score_the_fitness_ranks_by():
    record = {"exam": {"outcomes": {"s0": "0110", "s1": "1000"}, "logprob": {"s0": [-1.0, -0.5, -0.2, -2.0]}}}
    assert exam_cases(record, "accuracy")["s0"].tolist() == [0.0, 1.0, 1.0, 0.0]
    assert exam_cases(record, "logprob")["s0"].tolist() == [-1.0, -0.5, -0.2, -2.0]
    assert exam_cases({"members": {}}, "accuracy") == {}


def test_the_loop_selects_student_parents_on_their_cases(tiny):
    model, _ = tiny
    population = Population.initial({"teacher": 3, "student": 3})
    bank = AdapterBank(model, [m.slot for m in population.members], rank=2, alpha=4, target_modules=("q_proj",))
    for m in population.members:
        bank.init_factors(m.slot, torch.Generator().manual_seed(0), b_std=0.1)
    # s2 has the lowest accuracy and is replaced; s0 dominates s1 case by case, so s1 never breeds
    # under lexicase, though a fitness-vector operator would often pick it.
    fitness = {"t0": 3.0, "t1": 1.0, "t2": 2.0, "s0": 0.75, "s1": 0.5, "s2": 0.25}
    cases = {
        "s0": torch.tensor([1.0, 1, 1, 0]),
        "s1": torch.tensor([1.0, 1, 0, 0]),
        "s2": torch.tensor([0.0, 0, 0, 1]),
    }
    config = EvolutionConfig(gamma=0.3, elitism=1, crossover_rate=0.0, selection=OperatorChoice(name="lexicase"))
    parents = []
    for seed in range(40):
        trial = Population.initial({"teacher": 3, "student": 3})
        births = evolve(
            bank, trial, fitness, config, step=1, generator=torch.Generator().manual_seed(seed), cases=cases
        )
        parents += [p for b in births if b.role == "student" for p in b.parents]
    assert set(parents) == {"s0", "s2"}  # the replaced specialist's line goes on through its child


def test_a_run_hands_lexicase_each_students_exam_outcomes(tmp_path, single_thread, monkeypatch):
    from run_helpers import config_with

    import evolora.evolution
    from evolora.run import Run

    seen = []
    select = evolora.evolution.Scores.select
    monkeypatch.setattr(
        evolora.evolution.Scores, "select", lambda self, *args: seen.append(self.cases) or select(self, *args)
    )
    config = config_with(
        evolution={
            "every": 1,
            "gamma": 0.5,
            "selection": "lexicase",
            "fitness": {"name": "exam", "problems": 4, "size": 3},
        },
        task={"name": "arith", "params": {}},
        run={"steps": 2},
    )
    record, _ = Run(config, tmp_path / "run").run_step()
    outcomes = record["fitness"]["exam"]["outcomes"]
    tables = [cases for cases in seen if cases is not None]
    assert len(tables) == len(seen) - 1 >= 1  # the teachers' draw has no cases, the students' has
    assert tables[0].tolist() == [[float(c) for c in outcomes[s]] for s in ("s0", "s1")]
    student = record["evolution"]["selection"]["student"]
    assert student["replaced"] and all(p in outcomes for p in student["parents"])


def _replay_run(tmp_path):
    """A run directory with one recorded event of three students (the replay's input)."""
    import json

    import yaml

    run = tmp_path / "run"
    run.mkdir()
    evolution = {"fitness": {"score": "accuracy"}, "parent_pool": "role", "gamma": 0.5, "elitism": 1}
    (run / "config.yaml").write_text(yaml.safe_dump({"evolution": evolution}))
    members = {
        "t0": {"role": "teacher", "fitness": 0.1},
        "s0": {"role": "student", "fitness": 0.75, "accuracy": 0.75, "held_out": 0.3},
        "s1": {"role": "student", "fitness": 0.5, "accuracy": 0.5, "held_out": 0.0},
        "s2": {"role": "student", "fitness": 0.25, "accuracy": 0.25, "held_out": 0.6},
    }
    exam = {"outcomes": {"s0": "1110", "s1": "1100", "s2": "0001"}}
    births = [{"role": "student", "parents": ["s0", "s1"]}, {"role": "teacher", "parents": ["t0"]}]
    record = {"step": 5, "fitness": {"name": "exam", "members": members, "exam": exam}, "births": births}
    (run / "metrics.jsonl").write_text(json.dumps({"step": 4}) + "\n" + json.dumps(record) + "\n")
    return run


def test_the_replay_gives_each_operators_expected_selection_differential(tmp_path):
    from run_helpers import benchmark_module

    replay = benchmark_module("selection_replay")
    table = replay.replay([_replay_run(tmp_path)], draws=20_000, seed=0)
    held_out = [0.3, 0.0, 0.6]
    mean = sum(held_out) / 3
    # truncation (top half: s0 and s1 of three) and lexicase (s2 when its case leads, 1/4; else s0)
    for name, chances in {"truncation": [0.5, 0.5, 0.0], "lexicase": [0.75, 0.0, 0.25], "uniform": [1 / 3] * 3}.items():
        expected = 100 * (sum(p * h for p, h in zip(chances, held_out)) - mean)
        assert table[name]["held_out"]["mean"] == pytest.approx(expected, abs=1e-9), name  # exact chances
        assert table[name]["held_out"]["events"] == 1
    assert table["truncation"]["held_out"]["positive"] == 0 and table["lexicase"]["held_out"]["positive"] == 1
    # the spread of the realised S at the event's 2 students' parents: truncation's top two dealt one
    # each by universal sampling (no spread); drawn independently, SD = √(Var_p(x) / 2) = √(0.0225 / 2)
    assert table["truncation"]["spread"]["universal"] == pytest.approx(0.0, abs=1e-9)
    assert table["truncation"]["spread"]["independent"] == pytest.approx(100 * (0.0225 / 2) ** 0.5, abs=1e-9)


def test_the_command_line_notes_lexicase_without_an_exam():
    from run_helpers import config_with

    from evolora.cli.display import selection_note

    note = selection_note(config_with(evolution={"selection": "lexicase"}))
    assert "which only evolution.fitness: exam records; with 'rating' it gets none" in note
    assert selection_note(config_with(evolution={"selection": "lexicase", "fitness": "exam"})) is None
    assert selection_note(config_with(evolution={"selection": "tournament"})) is None
    assert selection_note(config_with(evolution={"selection": "lexicase", "enabled": False})) is None


def test_with_a_tolerance_a_member_beaten_everywhere_by_less_than_it_is_tied():
    # Member 1 trails member 0 by 0.05 on both cases; each case's deviation from its median is 0.05.
    cases = torch.tensor([[1.0, 1.0], [0.95, 0.95], [0.0, 0.0]], dtype=torch.float64)
    loose = lexicase(cases.mean(dim=1), 4000, generator=torch.Generator().manual_seed(0), cases=cases)
    assert (loose == 1).double().mean().item() == pytest.approx(0.5, abs=0.04) and (loose == 2).sum() == 0
    plain = lexicase(cases.mean(dim=1), 100, generator=torch.Generator().manual_seed(0), cases=cases, epsilon=0.0)
    assert set(plain.tolist()) == {0}


def test_a_role_can_have_its_own_selection():
    from run_helpers import config_with

    from evolora.cli.display import evolution_words
    from evolora.config import ConfigError
    from evolora.config.operator_choice import resolve_operators

    config = config_with(evolution={"roles": {"student": {"selection": "lexicase"}}, "fitness": "exam"})
    operators = resolve_operators(config.evolution)
    assert operators.for_role("student").selection[0].name == "lexicase"
    assert operators.for_role("teacher").selection[0].name == "tournament"
    assert operators.for_role("student").mutation == operators.mutation  # a kind left out is the section's
    assert evolution_words(config).endswith("student selection lexicase")
    with pytest.raises(ConfigError, match="evolution.roles.judge: no such role in the population; its roles: teacher"):
        config_with(evolution={"roles": {"judge": {"selection": "lexicase"}}})
    with pytest.raises(ConfigError, match=r"evolution.roles.student.selection: .*'lexicas'.*did you mean 'lexicase'"):
        config_with(evolution={"roles": {"student": {"selection": "lexicas"}}})


def test_the_loop_breeds_each_role_by_its_own_selection(tiny, monkeypatch):
    from evolora.config.operator_choice import resolve_operators

    model, _ = tiny
    population = Population.initial({"teacher": 3, "student": 3})
    bank = AdapterBank(model, [m.slot for m in population.members], rank=2, alpha=4, target_modules=("q_proj",))
    config = EvolutionConfig(
        gamma=0.3, crossover_rate=0.0, roles={"student": {"selection": {"name": "lexicase", "params": {"epsilon": 0}}}}
    )
    used = {}
    litter = evolve.__globals__["_Litter"]
    original = litter.children

    def spy(self, count):
        used[self.pool[0].role] = self.operators.selection[0].name
        return original(self, count)

    monkeypatch.setattr(litter, "children", spy)
    fitness = {"t0": 3.0, "t1": 1.0, "t2": 2.0, "s0": 0.75, "s1": 0.5, "s2": 0.25}
    cases = {"s0": torch.tensor([1.0, 1, 0]), "s1": torch.tensor([1.0, 0, 0]), "s2": torch.tensor([0.0, 0, 1])}
    evolve(
        bank,
        population,
        fitness,
        config,
        step=1,
        generator=torch.Generator().manual_seed(0),
        operators=resolve_operators(config),
        cases=cases,
    )
    assert used == {"teacher": "tournament", "student": "lexicase"}


def test_a_resumed_run_chooses_the_same_lexicase_parents(tmp_path, single_thread):
    from run_helpers import config_with

    from evolora.run import Run

    config = config_with(
        evolution={
            "every": 1,
            "gamma": 0.5,
            "roles": {"student": {"selection": "lexicase"}},
            "fitness": {"name": "exam", "problems": 4, "size": 3},
        },
        task={"name": "arith", "params": {}},
        run={"steps": 3, "checkpoint_every": 1},
    )
    whole = Run(config, tmp_path / "whole")
    expected = [whole.run_step()[0] for _ in range(2)][1]
    part = Run(config, tmp_path / "part")
    part.run_step()
    part.save_checkpoint()
    resumed = Run(config, tmp_path / "part")
    assert resumed.load_checkpoint()
    record, _ = resumed.run_step()
    assert record["evolution"] == expected["evolution"] and record["fitness"] == expected["fitness"]


def test_an_exam_without_problems_leaves_lexicase_the_fitness(tiny):
    model, _ = tiny
    population = Population.initial({"teacher": 2, "student": 3})
    bank = AdapterBank(model, [m.slot for m in population.members], rank=2, alpha=4, target_modules=("q_proj",))
    plain = OperatorChoice(name="lexicase", params={"epsilon": 0.0})
    config = EvolutionConfig(gamma=0.3, crossover_rate=0.0, selection=plain)
    fitness = {"t0": 1.0, "t1": 0.0, "s0": 0.5, "s1": 0.9, "s2": 0.1}
    empty = {s: torch.zeros(0, dtype=torch.float64) for s in ("s0", "s1", "s2")}
    births = evolve(bank, population, fitness, config, step=1, generator=torch.Generator().manual_seed(0), cases=empty)
    assert [b.parents for b in births if b.role == "student"] == [("s1",)]  # the only case: the fitness


@pytest.mark.parametrize("table", TABLES[:2])
@pytest.mark.parametrize("epsilon", [0.0, None])
def test_exact_chances_equal_the_enumeration_of_case_orders(table, epsilon):
    from evolora.operators import lexicase_chances

    cases = torch.tensor(table, dtype=torch.float64)
    tolerance = case_epsilon(cases).tolist() if epsilon is None else [epsilon] * cases.shape[1]
    exact = [float(p) for p in _exact(table, tolerance)]
    assert lexicase_chances(cases.mean(dim=1), cases, epsilon).tolist() == pytest.approx(exact)


def test_exact_chances_refuse_a_tolerance_on_continuous_scores():
    from evolora.operators import lexicase_chances

    cases = torch.tensor(TABLES[2], dtype=torch.float64)
    assert lexicase_chances(cases.mean(dim=1), cases, 0.0).sum().item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="exact lexicase chances need"):
        lexicase_chances(cases.mean(dim=1), cases, None)
