"""The selection sweep at 4 + 4 of docs/results/selection-sweep.md: one `evolora study` call.

Four arms that differ only in ``evolution.selection`` (each operator with its default parameters):
``population`` (tournament, set for every run, so the study report compares each arm with it),
``sel_truncation``, ``sel_rank`` and ``sel_fitness_proportional``. Every arm runs
tasks/arith.yaml at 4 teachers + 4 students with 2 problems per teacher per step (the 8 problems x 8
answers per step of the population-size study's ``size4`` arm), float32, one thread, the 270-item
held-out grid, and the fitness that study's pre-stated rule chose (its ``fitness-choice`` file:
``rating`` or ``validation``, 36 dev problems). Parents are drawn from the selection stream and
crossovers and mutations from the variation stream (evolora.streams), so the arms of one seed
differ only in the parents chosen. Finished runs are skipped, started ones resumed.

    OMP_NUM_THREADS=1 python benchmarks/selection_study.py 0 runs/study-selection \\
        --fitness-choice runs/study-popsize/fitness-choice
    python benchmarks/study_report.py runs/study-selection --out runs/study-selection/tables \\
        --arms population,sel_truncation,sel_rank,sel_fitness_proportional
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ARMS = {
    "population": "tournament",
    "sel_truncation": "truncation",
    "sel_rank": "rank",
    "sel_fitness_proportional": "fitness_proportional",
}
"""Arm name -> the selection operator it runs (``evolution.selection.name``), in run order; the
built-in ``population`` arm gets tournament from the sweep's own ``evolution.selection``."""

SIZE = ("population.teachers=4", "population.students=4", "selfplay.proposals_per_teacher=2")
"""4 + 4 at the population-size study's per-step rollouts (2 problems x 4 teachers x 8 answers)."""

PINNED = ("model.num_threads=1", "model.dtype=float32", "task.params.eval_per_cell=30", "eval.limit=270")
"""One thread, float32 and the 270-item held-out grid, as in the population-size study."""


def study_overrides(fitness: str) -> list[str]:
    """Every ``--set`` of the sweep: the size, the pinned settings, the fitness and the four arms.

    Raises:
        ValueError: ``fitness`` is not ``rating`` or ``validation``.
    """
    if fitness not in ("rating", "validation"):
        raise ValueError(f"the fitness choice is rating or validation, got {fitness!r}")
    choice = lambda name: {"name": name, "params": {}}  # noqa: E731
    arms = [
        f"study.arms.{arm}=" + json.dumps({"evolution.selection": choice(name)})
        for arm, name in ARMS.items()
        if arm != "population"
    ]
    return [
        *SIZE,
        *PINNED,
        "evolution.fitness=" + json.dumps({"name": fitness, "size": 36}),
        "evolution.selection=" + json.dumps(choice(ARMS["population"])),
        *arms,
    ]


def study_args(seeds: str, out: str, fitness: str, config: str = "tasks/arith.yaml") -> list[str]:
    """The ``evolora`` arguments of the sweep over ``seeds`` (``"0"``, ``"0-5"``) into ``out``."""
    args = ["study", config, "--arms", ",".join(ARMS), "--seeds", seeds, "--out", out]
    for override in study_overrides(fitness):
        args += ["--set", override]
    return args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seeds", help="seeds of this call: 0, 0,1 or 0-5")
    parser.add_argument("out", help="the study directory")
    choice = parser.add_mutually_exclusive_group(required=True)
    choice.add_argument("--fitness-choice", type=Path, help="the population-size study's fitness-choice file")
    choice.add_argument("--fitness", choices=["rating", "validation"], help="the fitness, given directly")
    args = parser.parse_args(argv)
    fitness = args.fitness or args.fitness_choice.read_text().strip()
    command = [sys.executable, "-m", "evolora.cli", *study_args(args.seeds, args.out, fitness)]
    print(" ".join(command), flush=True)
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
