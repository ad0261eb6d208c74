"""EvoTorch on LoRA adapters: a ``Problem`` whose solutions are flattened LoRA vectors.

    from evotorch.algorithms import SNES
    from evolora.integrations.evotorch import LoRAProblem, write_solution

    template = bank.get_factors("S0")                        # shapes (and the search's centre)
    problem = LoRAProblem(my_fitness, template, seed=0)      # my_fitness(adapter) -> float, maximised
    searcher = SNES(problem, stdev_init=0.01, center_init=problem.center, popsize=8)
    searcher.run(10)
    write_solution(searcher.status["best"], template, bank, "S0")   # then bank.save_adapter("S0", dir)

A solution is one vector of N = Σ r·(d_in + d_out) floats (2.44 M for SmolLM2-135M at rank 8 on all
seven linear modules): module by module, A (r, d_in) then B (d_out, r), row-major (see
:func:`evolora.integrations.adapters.flatten`). Any EvoTorch algorithm over real vectors runs:
``SNES``, ``PGPE``, ``CEM``, ``XNES`` and ``GeneticAlgorithm`` with ``GaussianMutation``/``SimulatedBinaryCrossOver``.
Memory: a population holds popsize × N floats (SNES's default popsize for N = 2.44 M is ~48: 0.5 GB).

Needs the optional extra: ``pip install 'evolora[evotorch]'``.
References: EvoTorch (Toklu et al., arXiv 2302.12600); SNES (Schaul et al., GECCO 2011).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from torch import Tensor

try:
    from evotorch import Problem, Solution, SolutionBatch
except ImportError as err:  # pragma: no cover - exercised only without the extra
    raise ImportError("evolora.integrations.evotorch needs EvoTorch: pip install 'evolora[evotorch]'") from err

from evolora.bank import Bank
from evolora.integrations.adapters import flatten, num_floats, save_to_bank, unflatten, write_to_bank
from evolora.operators import Adapter, check_adapter

__all__ = ["LoRAProblem", "flatten", "unflatten", "num_floats", "solution_adapter", "write_solution", "save_solution"]


class LoRAProblem(Problem):
    """Search LoRA weight space with EvoTorch: a solution is ``flatten(adapter)``.

    Each solution is unflattened (views, no copy) into an adapter shaped like ``template`` and
    scored by ``fitness(adapter)``. New solutions (a GA's initial population, or a distribution
    centre when none is given) are ``template + init_std · N(0, 1)``, drawn from the problem's
    own generator (``seed``).

    Args:
        fitness: adapter → float (held-out accuracy, self-play win rate, a reward, a loss...).
        template: the adapter giving module names, shapes, dtype and the search centre.
        objective_sense: ``"max"`` (default) or ``"min"``.
        init_std: std of the noise added to the template for new solutions, ≥ 0.
        seed: seed of the problem's generator (EvoTorch algorithms sample from it).
        device: where solutions live (default: the template's device).

    Raises:
        ValueError: malformed template, init_std < 0 or an unknown objective sense.
    """

    def __init__(
        self,
        fitness: Callable[[Adapter], float],
        template: Mapping[str, tuple[Tensor, Tensor]],
        *,
        objective_sense: str = "max",
        init_std: float = 0.01,
        seed: int | None = None,
        device: str | torch.device | None = None,
    ):
        check_adapter(template, what="template")
        if objective_sense not in ("max", "min"):
            raise ValueError(f"objective_sense must be 'max' or 'min', got {objective_sense!r}")
        if init_std < 0:
            raise ValueError(f"init_std must be ≥ 0, got {init_std}")
        first = next(iter(template.values()))[0]
        self.template = {name: (a.detach(), b.detach()) for name, (a, b) in template.items()}
        self.fitness = fitness
        self.init_std = init_std
        super().__init__(
            objective_sense,
            solution_length=num_floats(template),
            dtype=first.dtype,
            device=first.device if device is None else device,
            seed=seed,
        )
        self.center = flatten(self.template).to(self.device)
        """(N,) the template as a vector: pass it as ``center_init`` to SNES / PGPE / CEM."""

    def _fill(self, values: Tensor) -> None:
        # values: (n, N), filled in place with template + init_std · noise
        noise = self.make_gaussian(values.shape, dtype=values.dtype, device=values.device)
        values.copy_(self.center.to(values.dtype) + self.init_std * noise)

    def _evaluate(self, solution: Solution) -> None:
        adapter = unflatten(solution.values, self.template)
        solution.set_evaluation(float(self.fitness(adapter)))


def solution_adapter(
    solution: Solution | SolutionBatch | Tensor, template: Mapping[str, tuple[Tensor, Tensor]]
) -> Adapter:
    """The adapter of an EvoTorch solution (or a raw (N,) vector), copied out of EvoTorch's storage."""
    values = solution.values if hasattr(solution, "values") else solution
    vector = torch.as_tensor(values, device=next(iter(template.values()))[0].device).detach()
    if vector.ndim == 2 and vector.shape[0] == 1:
        vector = vector[0]
    return {name: (a.clone(), b.clone()) for name, (a, b) in unflatten(vector, template).items()}


def write_solution(
    solution: Solution | Tensor, template: Mapping[str, tuple[Tensor, Tensor]], bank: Bank, slot: str
) -> None:
    """Overwrite ``bank``'s ``slot`` with a solution (e.g. ``searcher.status["best"]`` or ``center``)."""
    write_to_bank(solution_adapter(solution, template), bank, slot)


def save_solution(
    solution: Solution | Tensor,
    template: Mapping[str, tuple[Tensor, Tensor]],
    bank: Bank,
    slot: str,
    directory: str | Path,
) -> Path:
    """Write a solution into ``slot`` and save it as a PEFT adapter directory (``PeftModel.from_pretrained``)."""
    return save_to_bank(solution_adapter(solution, template), bank, slot, directory)
