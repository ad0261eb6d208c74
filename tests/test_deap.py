"""DEAP on LoRA individuals: eaSimple / eaMuPlusLambda unchanged, cheap clones, user operators everywhere."""

from __future__ import annotations

import copy
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from deap import algorithms, base, tools
from peft import PeftModel
from typer.testing import CliRunner

from evolora.bank.local import AdapterBank
from evolora.cli import app
from evolora.config import ConfigError, config_from_dict
from evolora.integrations.adapters import adapter_shapes
from evolora.integrations.deap import (
    BankEvaluator,
    FitnessMin,
    LoRAIndividual,
    make_toolbox,
    population_from_bank,
    random_population,
    save_individual,
)
from evolora.io import read_jsonl
from evolora.model import load_base
from evolora.operators import REGISTRY
from evolora.run import Run

torch.set_num_threads(1)

CALLS = {"sign_flip": 0}


def sign_flip(parent, *, generator, scale: float = 1.0):
    """A user mutation: ΔW → −scale·ΔW (negate B). New tensors, parent untouched."""
    CALLS["sign_flip"] += 1
    return {name: (a.clone(), -scale * b) for name, (a, b) in parent.items()}


USER_MUTATION = f"{__name__}:sign_flip"
GSM_YAML = Path(__file__).resolve().parents[1] / "tasks" / "gsm.yaml"


@pytest.fixture(autouse=True)
def restore_registry():
    """Operator names are global: undo this file's registrations so other tests see the built-ins only."""
    saved = {kind: dict(specs) for kind, specs in REGISTRY._specs.items()}
    yield
    REGISTRY._specs.clear()
    REGISTRY._specs.update(saved)


@pytest.fixture(scope="module")
def bank():
    model, tokenizer = load_base("tiny-random")
    bank = AdapterBank(model, ["E0", "E1"], rank=4, alpha=8, target_modules=("q_proj", "v_proj"))
    bank.tokenizer = tokenizer
    return bank


def neg_loss(bank):
    """Model-based fitness: minus the LM loss of a fixed string under the individual's adapter."""
    ids = bank.tokenizer("12+30=42", return_tensors="pt")["input_ids"]
    return BankEvaluator(bank, "E0", lambda model, slot: -model(input_ids=ids, labels=ids).loss.item())


def _population(bank, size=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shapes = adapter_shapes(bank.get_factors("E0"))
    return random_population(size, shapes, rank=4, generator=generator, b_std=0.05), generator


def _stats():
    stats = tools.Statistics(lambda ind: ind.fitness.values)
    stats.register("max", np.max)
    stats.register("avg", np.mean)
    return stats


def _snapshot(population):
    return [{n: (a.clone(), b.clone()) for n, (a, b) in ind.factors.items()} for ind in population]


def _unchanged(population, snapshot):
    return all(
        torch.equal(x, y)
        for ind, snap in zip(population, snapshot)
        for n in snap
        for x, y in zip(ind.factors[n], snap[n])
    )


def test_ea_simple_two_generations_on_tiny_model(bank):
    population, generator = _population(bank)
    originals, snapshot = list(population), _snapshot(population)  # eaSimple rewrites the list in place
    random.seed(0)
    toolbox = make_toolbox(evaluate=neg_loss(bank), generator=generator)
    hall = tools.HallOfFame(2)
    final, logbook = algorithms.eaSimple(
        population, toolbox, cxpb=0.6, mutpb=0.6, ngen=2, stats=_stats(), halloffame=hall, verbose=False
    )
    assert isinstance(logbook, tools.Logbook) and logbook.select("gen") == [0, 1, 2]
    assert logbook.select("nevals")[0] == 6 and sum(logbook.select("nevals")[1:]) > 0
    assert len(final) == 6 and all(ind.fitness.valid for ind in final)
    assert len(hall) == 2 and hall[0].fitness >= hall[1].fitness
    assert max(logbook.select("max")) == pytest.approx(hall[0].fitness.values[0])
    assert _unchanged(originals, snapshot)  # operators never wrote into the parents' tensors
    shapes = adapter_shapes(bank.get_factors("E0"))
    assert all(adapter_shapes(ind.factors) == shapes for ind in final)


def test_ea_mu_plus_lambda_with_registry_selection(bank):
    population, generator = _population(bank, seed=1)
    random.seed(1)
    toolbox = make_toolbox(
        evaluate=neg_loss(bank),
        generator=generator,
        crossover="layer_swap",
        mutation=("gaussian", {"sigma": 0.2}),
        selection=("truncation", {"fraction": 0.5}),
    )
    hall = tools.HallOfFame(1)
    final, logbook = algorithms.eaMuPlusLambda(
        population,
        toolbox,
        mu=6,
        lambda_=8,
        cxpb=0.4,
        mutpb=0.4,
        ngen=2,
        stats=_stats(),
        halloffame=hall,
        verbose=False,
    )
    assert len(final) == 6 and logbook.select("gen") == [0, 1, 2]
    assert all(ind.fitness.valid for ind in final)
    assert hall[0].fitness.values[0] >= logbook.select("max")[0]
    ranked = population[:4]
    for value, ind in enumerate(ranked):
        ind.fitness.values = (float(value),)
    chosen = toolbox.select(ranked, 20)  # truncation 0.5: only the top two ever
    assert {id(ind) for ind in chosen} <= {id(ranked[2]), id(ranked[3])}


def test_clone_shares_tensors_copies_fitness_and_pickles(bank):
    population, _ = _population(bank, size=1)
    ind = population[0]
    ind.fitness.values = (1.5,)
    twin = copy.deepcopy(ind)
    assert twin is not ind and twin.factors is not ind.factors and twin == ind
    assert all(x is y for n in ind.factors for x, y in zip(ind.factors[n], twin.factors[n]))
    del twin.fitness.values
    assert ind.fitness.valid and not twin.fitness.valid
    back = pickle.loads(pickle.dumps(ind))
    assert back == ind and back.fitness.values == (1.5,)
    other = LoRAIndividual(ind.factors, FitnessMin())
    other.fitness.values = (1.0,)
    assert other.fitness.wvalues == (-1.0,)


def test_bank_round_trip_and_peft_directory(bank, tmp_path):
    bank.init_factors("E1", torch.Generator().manual_seed(3), b_std=0.05)
    (ind,) = population_from_bank(bank, ["E1"])
    assert all(torch.equal(x, y) for n, f in bank.get_factors("E1").items() for x, y in zip(f, ind.factors[n]))
    population, _ = _population(bank, size=1, seed=7)
    path = save_individual(population[0], bank, "E1", tmp_path / "adapter")
    model, _ = load_base("tiny-random")
    loaded = PeftModel.from_pretrained(model, path)
    name = next(iter(population[0].factors))
    weight = dict(loaded.named_parameters())[f"base_model.model.{name}.lora_A.default.weight"]
    assert torch.equal(weight, population[0].factors[name][0])


def test_unknown_operator_or_parameter_names_what_is_allowed():
    generator = torch.Generator()
    with pytest.raises(ValueError, match="unknown mutation 'gausian'"):
        make_toolbox(evaluate=len, generator=generator, mutation="gausian")
    with pytest.raises(ValueError, match="allowed: sigma"):
        make_toolbox(evaluate=len, generator=generator, mutation=("gaussian", {"sigam": 1.0}))


# -- a user-defined operator: one call (or 'module:function'), then CLI, YAML, loop and DEAP alike -----


def test_user_mutation_registered_once_runs_in_deap(bank):
    REGISTRY.register("mutation", "sign_flip", sign_flip)  # the one call
    population, generator = _population(bank, size=4, seed=2)
    random.seed(2)
    before = CALLS["sign_flip"]
    for mutation in ("sign_flip", (USER_MUTATION, {"scale": 0.5})):
        toolbox = make_toolbox(evaluate=neg_loss(bank), generator=generator, mutation=mutation)
        algorithms.eaSimple(population, toolbox, cxpb=0.0, mutpb=1.0, ngen=1, verbose=False)
    assert CALLS["sign_flip"] - before == 8  # every offspring mutated, twice over
    (child,) = make_toolbox(evaluate=len, generator=generator, mutation=(USER_MUTATION, {"scale": 0.5})).mutate(
        copy.deepcopy(population[0])
    )
    for name, (a, b) in population[0].factors.items():
        assert torch.equal(child.factors[name][1], -0.5 * b)


def test_user_mutation_from_yaml_drives_the_evolution_loop(tmp_path, toy_task, tiny_config):
    data = tiny_config.model_dump(mode="json")
    data["run"]["steps"] = 1
    data["evolution"] = {
        **data["evolution"],
        "crossover_rate": 0.0,
        "at_last_step": True,
        "mutation": {"name": USER_MUTATION, "params": {"scale": 2.0}},
    }
    config = config_from_dict(data)
    assert config.evolution.mutation.name == USER_MUTATION
    with pytest.raises(ConfigError, match="unknown parameter 'scael'"):
        config_from_dict(
            {**data, "evolution": {**data["evolution"], "mutation": {"name": USER_MUTATION, "params": {"scael": 1}}}}
        )
    model, tokenizer = load_base("tiny-random")
    run = Run(config, tmp_path, model=model, tokenizer=tokenizer, task=toy_task)
    before = CALLS["sign_flip"]
    record, _ = run.run_step()
    assert [b["operator"] for b in record["births"]] == [USER_MUTATION] * 2  # one child per role
    assert CALLS["sign_flip"] - before == 2


def test_user_mutation_from_the_cli(tmp_path):
    config = tmp_path / "user.yaml"
    config.write_text(
        GSM_YAML.read_text().replace(
            "mutation: {name: lowrank_gaussian, params: {}}", f"mutation: {{name: '{USER_MUTATION}', params: {{}}}}"
        )
    )
    assert USER_MUTATION in config.read_text()
    flags = [
        "--set",
        "model.name=tiny-random",
        "--set",
        "lora.rank=2",
        "--set",
        "selfplay.roles.teacher.max_new_tokens=8",
        "--set",
        "selfplay.roles.student.max_new_tokens=8",
        "--set",
        "eval.limit=0",
        "--set",
        "run.steps=1",
        "--set",
        "evolution.every=1",
        "--set",
        "evolution.crossover_rate=0",
        "--set",
        "model.num_threads=1",
        "--set",
        "evolution.at_last_step=true",
    ]
    result = CliRunner().invoke(app, ["evolve", str(config), "--out", str(tmp_path / "run"), *flags])
    assert result.exit_code == 0, result.output
    births = [b for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") for b in r["births"]]
    assert births and {b["operator"] for b in births} == {USER_MUTATION}


def _zero_fitness(model, slot):
    """A picklable fitness, so only the evaluator itself can refuse to travel."""
    return 0.0


def test_bank_evaluator_refuses_to_be_pickled_into_another_process(bank):
    """Pool(2).map(evaluator, ...) once gave 23-33 of 80 individuals another's fitness, silently:
    the workers shared the pickled bank's tensors and overwrote one scratch slot."""
    import multiprocessing

    evaluator = BankEvaluator(bank, "E0", _zero_fitness)
    with pytest.raises(TypeError, match="one AdapterBank and BankEvaluator per worker.*initializer"):
        pickle.dumps(evaluator)
    population, _ = _population(bank, size=4)
    pool = multiprocessing.get_context("fork").Pool(2)
    try:
        with pytest.raises(TypeError, match="cannot be pickled or sent to another process"):
            pool.map_async(evaluator, population).get(timeout=60)
    finally:  # close + join, not terminate: no SIGTERM to workers that may inherit a handler
        pool.close()
        pool.join()
    assert [evaluator(ind) for ind in population] == [(0.0,)] * 4  # in-process use is unchanged


class _Cases(base.Fitness):
    """Three cases, each maximised (what lexicase reads as its cases)."""

    weights = (1.0, 1.0, 1.0)


def test_lexicase_in_deap_reads_each_fitness_value_as_a_case(bank):
    from evolora.integrations.deap import LoRAIndividual

    population, generator = _population(bank, seed=2)
    toolbox = make_toolbox(evaluate=neg_loss(bank), generator=generator, selection="lexicase")
    table = [(1.0, 1.0, 0.0), (0.0, 0.0, 1.0), (1.0, 0.0, 0.0), (0.0, 0.0, 0.0)]  # 2 and 3 are dominated
    individuals = [LoRAIndividual(ind.factors, _Cases()) for ind in population[:4]]
    for ind, values in zip(individuals, table):
        ind.fitness.values = values
    chosen = [individuals.index(ind) for ind in toolbox.select(individuals, 600)]
    assert set(chosen) == {0, 1}  # summed, 1 and 2 tie behind 0; case by case, 1 is a specialist and 2 is dominated
    assert chosen.count(1) / 600 == pytest.approx(1 / 3, abs=0.07)  # the third case leads a third of the time


def test_universal_sampling_deals_each_individual_its_share(bank):
    population, generator = _population(bank, size=4, seed=2)
    for value, ind in enumerate(population):
        ind.fitness.values = (float(value),)
    toolbox = make_toolbox(
        evaluate=neg_loss(bank), generator=generator, selection=("rank", {"pressure": 2.0}), sampling="universal"
    )
    # linear ranking at s = 2 over 4: chances 3/6, 2/6, 1/6, 0 from the best; 6 draws deal exactly 3, 2, 1, 0
    for _ in range(10):
        chosen = [id(ind) for ind in toolbox.select(population, 6)]
        assert [chosen.count(id(ind)) for ind in population] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="needs an evolora selection by name"):
        make_toolbox(evaluate=neg_loss(bank), generator=generator, sampling="universal")
    with pytest.raises(ValueError, match="'independent' or 'universal'"):
        make_toolbox(evaluate=neg_loss(bank), generator=generator, selection="rank", sampling="stratified")
