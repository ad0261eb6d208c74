"""DEAP on LoRA adapters: a ``deap.base.Toolbox`` whose operators are evolora's.

    import random, torch
    from deap import algorithms, tools
    from evolora.integrations.deap import make_toolbox, random_population

    random.seed(0)                                           # DEAP draws its coins from `random`
    generator = torch.Generator().manual_seed(0)             # evolora operators draw from this
    toolbox = make_toolbox(evaluate=my_fitness, generator=generator,
                           crossover="svd_merge", mutation=("lowrank_gaussian", {"sigma": 0.2}))
    population = random_population(8, {"q_proj": (64, 64)}, rank=4, generator=generator)
    population, logbook = algorithms.eaSimple(population, toolbox, cxpb=0.5, mutpb=0.3, ngen=5,
                                              halloffame=tools.HallOfFame(1))

An individual is a :class:`LoRAIndividual`: a dict of factors plus a DEAP fitness. DEAP deep-copies
offspring every generation; evolora operators return new tensors and never modify their inputs,
so a copy shares the (immutable by convention) tensors and costs one dict, not 2.44 M floats.
``mate`` and ``mutate`` follow DEAP's in-place convention: they *replace* the individual's factor
dict (never write into its tensors) and return the individuals; the algorithms then delete the
fitness. No ``deap.creator`` classes: :class:`FitnessMax` and :class:`FitnessMin` are ordinary
``base.Fitness`` subclasses (use your own for several objectives).

References: DEAP (Fortin et al., JMLR 2012); PopuLoRA, arXiv 2605.16727, §3.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

import torch
from deap import base, tools

from evolora.bank import LocalBank
from evolora.config.evolution import Sampling
from evolora.integrations.adapters import random_adapter, save_to_bank, write_to_bank
from evolora.operators import REGISTRY, Adapter, OperatorSpec, require_exact, universal_selection

__all__ = [
    "FitnessMax",
    "FitnessMin",
    "LoRAIndividual",
    "make_toolbox",
    "clone_individual",
    "score",
    "mate",
    "mutate",
    "select",
    "population_from_bank",
    "random_population",
    "write_individual",
    "save_individual",
    "BankEvaluator",
]

OperatorChoice = str | tuple[str, Mapping[str, Any]]
"""An operator by registry name (``"svd_merge"``, ``"my_pkg.ops:fn"``) or (name, params)."""


class FitnessMax(base.Fitness):
    """One objective, maximised (e.g. held-out accuracy, win rate)."""

    weights = (1.0,)


class FitnessMin(base.Fitness):
    """One objective, minimised (e.g. a loss)."""

    weights = (-1.0,)


class LoRAIndividual:
    """A DEAP individual: LoRA factors {module: (A (r, d_in), B (d_out, r))} and a DEAP fitness.

    Copies (``copy.deepcopy``, ``toolbox.clone``) share the factor tensors and copy the fitness:
    treat the tensors as immutable and replace ``factors`` instead of writing into it. Two
    individuals are equal when their factors are (the same tensors, or equal values), which is
    what ``tools.HallOfFame`` uses to skip duplicates. Picklable.

    Args:
        factors: the adapter (kept as given, not copied).
        fitness: a ``base.Fitness`` instance (default: a fresh, invalid :class:`FitnessMax`).
    """

    __slots__ = ("factors", "fitness")

    def __init__(self, factors: Adapter, fitness: base.Fitness | None = None):
        self.factors = dict(factors)
        self.fitness = FitnessMax() if fitness is None else fitness

    def __deepcopy__(self, memo: dict) -> LoRAIndividual:
        return LoRAIndividual(self.factors, copy.deepcopy(self.fitness, memo))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LoRAIndividual):
            return NotImplemented
        if self.factors.keys() != other.factors.keys():
            return False
        return all(
            x is y or (x.shape == y.shape and torch.equal(x, y))
            for name in self.factors
            for x, y in zip(self.factors[name], other.factors[name])
        )

    __hash__ = None  # equality is by value

    def __repr__(self) -> str:
        modules = len(self.factors)
        values = self.fitness.values if self.fitness.valid else "invalid"
        return f"LoRAIndividual({modules} modules, fitness={values})"


def clone_individual(individual: LoRAIndividual) -> LoRAIndividual:
    """A new individual sharing ``individual``'s tensors, with a copy of its fitness (DEAP's ``clone``)."""
    return copy.deepcopy(individual)


def score(individual: LoRAIndividual) -> float:
    """Scalar fitness for evolora operators: Σ weights·values (higher is better); −inf when invalid."""
    return float(sum(individual.fitness.wvalues)) if individual.fitness.valid else -math.inf


def _resolve(kind: str, choice: OperatorChoice) -> tuple[OperatorSpec, dict[str, Any]]:
    name, params = (choice, {}) if isinstance(choice, str) else choice
    params = REGISTRY.validate(kind, name, params)  # also imports 'package.module:function'
    return REGISTRY.get(kind, name), params


def mate(
    first: LoRAIndividual,
    second: LoRAIndividual,
    *,
    operator: OperatorSpec,
    params: Mapping[str, Any],
    generator: torch.Generator,
) -> tuple[LoRAIndividual, LoRAIndividual]:
    """DEAP ``mate``: ``first`` ← crossover(first, second), ``second`` ← crossover(second, first).

    Both children are made from the parents as they were; each gets its own operator call (so
    stochastic crossovers give two different children; deterministic, order-symmetric ones such
    as ``svd_merge`` give two equal ones). Parent fitness comes from :func:`score`; when either
    is invalid both count as 0. The individuals' factor dicts are replaced, their tensors untouched.
    """
    fitness = [score(first), score(second)]
    if not all(math.isfinite(f) for f in fitness):
        fitness = [0.0, 0.0]
    parents = [first.factors, second.factors]
    child_first = operator.fn(parents, fitness, generator=generator, **params)
    child_second = operator.fn(parents[::-1], fitness[::-1], generator=generator, **params)
    first.factors, second.factors = child_first, child_second
    return first, second


def mutate(
    individual: LoRAIndividual, *, operator: OperatorSpec, params: Mapping[str, Any], generator: torch.Generator
) -> tuple[LoRAIndividual]:
    """DEAP ``mutate``: replace the individual's factors by a mutated child; returns a 1-tuple."""
    individual.factors = operator.fn(individual.factors, generator=generator, **params)
    return (individual,)


def select(
    individuals: Sequence[LoRAIndividual],
    k: int,
    *,
    operator: OperatorSpec,
    params: Mapping[str, Any],
    generator: torch.Generator,
    sampling: str = "independent",
) -> list[LoRAIndividual]:
    """DEAP ``select`` through an evolora selection operator on :func:`score` (the same objects, k times).

    An operator that takes per-case scores (``lexicase``) gets each individual's weighted fitness
    values as its cases, a (P, N) table (an invalid individual: −inf on every case), as DEAP's own
    ``selLexicase`` reads ``fitness.values``: give the fitness class one weight per case.
    ``sampling="universal"`` deals the k by stochastic universal sampling over the operator's exact
    chances (:func:`evolora.operators.universal`): each individual ⌊k·p⌋ or ⌈k·p⌉ times.

    Raises:
        ValueError: ``universal`` sampling with an operator whose chances have no exact form.
    """
    fitness = torch.tensor([score(ind) for ind in individuals], dtype=torch.float64, device="cpu")
    cases = _cases(individuals) if operator.takes_cases else None
    if sampling == "universal":
        index = universal_selection(operator.name, fitness, k, generator=generator, params=params, cases=cases)
    else:
        index = operator.select(fitness, k, generator=generator, cases=cases, **params)
    return [individuals[i] for i in index.tolist()]


def _cases(individuals: Sequence[LoRAIndividual]) -> torch.Tensor:
    """(P, N) weighted fitness values of ``individuals`` (N weights of their fitness class; −inf rows when invalid)."""
    width = max(len(ind.fitness.weights) for ind in individuals)
    rows = [list(ind.fitness.wvalues) if ind.fitness.valid else [-math.inf] * width for ind in individuals]
    return torch.tensor(rows, dtype=torch.float64, device="cpu")


def make_toolbox(
    *,
    evaluate: Callable[[LoRAIndividual], tuple[float, ...]],
    generator: torch.Generator,
    crossover: OperatorChoice = "svd_merge",
    mutation: OperatorChoice = "lowrank_gaussian",
    selection: OperatorChoice | Callable[..., list] | None = None,
    sampling: Sampling = "independent",
    toolbox: base.Toolbox | None = None,
) -> base.Toolbox:
    """Fill a ``deap.base.Toolbox`` with ``evaluate``, ``mate``, ``mutate``, ``select`` and ``clone``.

    ``deap.algorithms.eaSimple``, ``eaMuPlusLambda`` and ``eaMuCommaLambda`` then run unchanged
    on :class:`LoRAIndividual` populations, with ``tools.HallOfFame``, ``tools.Statistics`` and
    ``tools.Logbook``.

    Args:
        evaluate: individual → tuple of fitness values (one per weight of its fitness class), e.g.
            ``lambda ind: (accuracy(ind.factors),)`` or a :class:`BankEvaluator`.
        generator: drives every evolora operator (DEAP's own coins come from ``random``: seed it).
        crossover, mutation: a registered name (see ``evolora operators``), a
            ``"package.module:function"`` user function, or ``(name, params)``; params are checked
            against the operator's declared ranges now.
        selection: ``None`` → DEAP's ``tools.selTournament(tournsize=3)``; a DEAP-style callable
            ``f(individuals, k)``; or an evolora selection name / ``(name, params)``.
        sampling: with an evolora selection, ``"independent"`` (k draws of the operator) or
            ``"universal"`` (stochastic universal sampling over its exact chances, as
            ``evolution.sampling``); a built-in selection other than ``lexicase`` on continuous
            multi-value fitness has them.
        toolbox: fill this toolbox instead of a new one.

    Raises:
        ValueError: unknown operator or parameter, or a value out of range (the message lists what
            is allowed); ``universal`` sampling without an evolora selection that has exact chances.
    """
    if sampling not in get_args(Sampling):
        raise ValueError(f"sampling must be {' or '.join(map(repr, get_args(Sampling)))}, got {sampling!r}")
    toolbox = base.Toolbox() if toolbox is None else toolbox
    cross_spec, cross_params = _resolve("crossover", crossover)
    mut_spec, mut_params = _resolve("mutation", mutation)
    toolbox.register("evaluate", evaluate)
    toolbox.register("mate", mate, operator=cross_spec, params=cross_params, generator=generator)
    toolbox.register("mutate", mutate, operator=mut_spec, params=mut_params, generator=generator)
    toolbox.register("clone", clone_individual)
    if sampling == "universal" and (selection is None or callable(selection)):
        raise ValueError("sampling='universal' needs an evolora selection by name, e.g. selection='tournament'")
    if selection is None:
        toolbox.register("select", tools.selTournament, tournsize=3)
    elif callable(selection):
        toolbox.register("select", selection)
    else:
        sel_spec, sel_params = _resolve("selection", selection)
        if sampling == "universal":
            require_exact(sel_spec.name)
        toolbox.register("select", select, operator=sel_spec, params=sel_params, generator=generator, sampling=sampling)
    return toolbox


def population_from_bank(
    bank: LocalBank, slots: Iterable[str] | None = None, fitness: type[base.Fitness] = FitnessMax
) -> list[LoRAIndividual]:
    """One individual per bank slot (default: every slot), holding a copy of its factors."""
    return [LoRAIndividual(bank.get_factors(slot), fitness()) for slot in (bank.slots if slots is None else slots)]


def random_population(
    size: int,
    shapes: Mapping[str, tuple[int, int]],
    *,
    rank: int,
    generator: torch.Generator,
    b_std: float = 0.01,
    fitness: type[base.Fitness] = FitnessMax,
) -> list[LoRAIndividual]:
    """``size`` individuals with random factors (see :func:`evolora.integrations.adapters.random_adapter`).

    Args:
        shapes: module name → (d_in, d_out); use ``adapter_shapes(bank.get_factors(slot))`` for a bank's.
    """
    return [
        LoRAIndividual(random_adapter(shapes, rank=rank, generator=generator, b_std=b_std), fitness())
        for _ in range(size)
    ]


def write_individual(individual: LoRAIndividual, bank: LocalBank, slot: str) -> None:
    """Overwrite ``bank``'s ``slot`` with the individual's factors."""
    write_to_bank(individual.factors, bank, slot)


def save_individual(individual: LoRAIndividual, bank: LocalBank, slot: str, directory: str | Path) -> Path:
    """Write the individual into ``slot`` and save it as a PEFT adapter directory (``PeftModel.from_pretrained``)."""
    return save_to_bank(individual.factors, bank, slot, directory)


class BankEvaluator:
    """DEAP ``evaluate`` that runs a model-based fitness on the individual's adapter.

    For each individual: write its factors into the bank's ``slot``, make that slot active, and
    return ``(fitness(bank.model, slot),)`` (computed under ``torch.no_grad``). Use it for
    held-out accuracy (``evolora.evaluation.evaluate`` with ``adapters=[slot]``), a likelihood,
    or any reward.

    Args:
        bank: an :class:`evolora.bank.local.AdapterBank` of the individuals' shapes.
        slot: a scratch slot the evaluator may overwrite.
        fitness: (peft model, slot) → float, higher is better under :class:`FitnessMax`.

    Not picklable, so not for ``multiprocessing.Pool.map`` as is: a pickled bank's tensors go
    to the workers as shared memory, every worker would write the same scratch slot and
    fitnesses would silently belong to other individuals. Build one bank and evaluator per
    worker instead (a ``Pool(initializer=...)`` that loads the base and makes the bank there).

    Raises:
        TypeError: on ``pickle.dumps`` / ``copy.copy`` / sending it to another process.
    """

    def __init__(self, bank: LocalBank, slot: str, fitness: Callable[[Any, str], float]):
        self.bank, self.slot, self.fitness = bank, slot, fitness

    def __reduce_ex__(self, protocol):
        raise TypeError(
            "BankEvaluator cannot be pickled or sent to another process: the workers would share the "
            "bank's tensors and overwrite one scratch slot, giving wrong fitness; build one AdapterBank "
            "and BankEvaluator per worker, e.g. in a multiprocessing.Pool(initializer=...) function"
        )

    def __call__(self, individual: LoRAIndividual) -> tuple[float]:
        write_individual(individual, self.bank, self.slot)
        self.bank.activate(self.slot)
        with torch.no_grad():
            return (float(self.fitness(self.bank.model, self.slot)),)
