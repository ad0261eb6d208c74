"""EvoTorch on LoRA vectors: SNES / PGPE / CEM / GA on a tiny model's adapter; flatten ↔ unflatten; back to PEFT."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
from peft import PeftModel

from evolora.bank.local import AdapterBank
from evolora.integrations.adapters import flatten, num_floats, random_adapter, unflatten
from evolora.model import load_base

evotorch = pytest.importorskip("evotorch", reason="optional extra: pip install 'evolora[evotorch]'")
from evotorch.algorithms import CEM, PGPE, SNES, GeneticAlgorithm  # noqa: E402
from evotorch.operators import GaussianMutation, SimulatedBinaryCrossOver  # noqa: E402

from evolora.integrations.evotorch import LoRAProblem, save_solution, solution_adapter  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def setup():
    model, tokenizer = load_base("tiny-random")
    bank = AdapterBank(model, ["E0", "E1"], rank=4, alpha=8, target_modules=("q_proj", "v_proj"))
    bank.init_factors("E0", torch.Generator().manual_seed(0), b_std=0.05)
    ids = tokenizer("12+30=42", return_tensors="pt")["input_ids"]

    def fitness(adapter):  # minus the LM loss under the candidate adapter
        bank.set_factors("E1", adapter)
        bank.activate("E1")
        with torch.no_grad():
            return -bank.model(input_ids=ids, labels=ids).loss.item()

    return bank, fitness


def test_flatten_unflatten_round_trip_and_layout():
    adapter = random_adapter({"q": (6, 5), "k": (6, 3)}, rank=2, generator=torch.Generator().manual_seed(0))
    vector = flatten(adapter)
    assert vector.shape == (num_floats(adapter),) == (2 * (6 + 5) + 2 * (6 + 3),)
    assert torch.equal(vector[:12], adapter["q"][0].reshape(-1))  # q's A (r, d_in) comes first
    back = unflatten(vector, adapter)
    assert list(back) == ["q", "k"]
    assert all(torch.equal(x, y) for n in adapter for x, y in zip(adapter[n], back[n]))
    assert back["q"][0].data_ptr() == vector.data_ptr()  # views, no copy
    with pytest.raises(ValueError, match="pass one solution"):
        unflatten(torch.zeros(2, vector.numel()), adapter)


def test_smollm2_rank8_vector_length():
    shapes = {
        "q": (576, 576),
        "k": (576, 192),
        "v": (576, 192),
        "o": (576, 576),
        "gate": (576, 1536),
        "up": (576, 1536),
        "down": (1536, 576),
    }
    per_layer = sum(8 * (d_in + d_out) for d_in, d_out in shapes.values())
    assert 30 * per_layer == 2_442_240  # 2.44 M floats


def test_snes_two_generations_on_tiny_model_and_back_to_peft(setup, tmp_path):
    bank, fitness = setup
    template = bank.get_factors("E0")
    problem = LoRAProblem(fitness, template, seed=0)
    assert problem.solution_length == bank.num_parameters()
    searcher = SNES(problem, stdev_init=0.01, center_init=problem.center, popsize=6)
    searcher.run(2)
    assert searcher.step_count == 2
    best = searcher.status["best"]
    assert best.evals.item() == pytest.approx(fitness(solution_adapter(best, template)))
    path = save_solution(best, template, bank, "E1", tmp_path / "best")
    loaded = PeftModel.from_pretrained(load_base("tiny-random")[0], path)
    name = next(iter(template))
    weight = dict(loaded.named_parameters())[f"base_model.model.{name}.lora_B.default.weight"]
    assert torch.equal(weight, solution_adapter(best, template)[name][1])


@pytest.mark.parametrize("algorithm", ["PGPE", "CEM", "GeneticAlgorithm"])
def test_other_searchers_run_one_generation(setup, algorithm):
    bank, fitness = setup
    template = bank.get_factors("E0")
    problem = LoRAProblem(fitness, template, seed=1, init_std=0.01)
    if algorithm == "PGPE":
        searcher = PGPE(
            problem,
            popsize=4,
            center_learning_rate=0.01,
            stdev_learning_rate=0.1,
            stdev_init=0.01,
            center_init=problem.center,
        )
    elif algorithm == "CEM":
        searcher = CEM(problem, popsize=4, parenthood_ratio=0.5, stdev_init=0.01, center_init=problem.center)
    else:
        searcher = GeneticAlgorithm(
            problem,
            popsize=4,
            operators=[
                SimulatedBinaryCrossOver(problem, tournament_size=2, eta=8),
                GaussianMutation(problem, stdev=0.01),
            ],
        )
    searcher.run(1)
    assert torch.isfinite(torch.as_tensor(searcher.status["best_eval"]))


def test_missing_extra_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "evotorch", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "evolora.integrations.evotorch")
    with pytest.raises(ImportError, match=r"pip install 'evolora\[evotorch\]'"):
        importlib.import_module("evolora.integrations.evotorch")
