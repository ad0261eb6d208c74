"""Shared run settings of the tests: the tiny random model's config overrides.

Tests import shared helpers one way only: as bare modules of ``tests/`` (``from run_helpers
import TINY_OVERRIDES``, ``from bank_helpers import random_bank``), never through ``tests.`` or
another test module (``tests/test_layout.py`` checks it).
"""

from __future__ import annotations

from pathlib import Path

TINY_OVERRIDES = {
    "model": {"name": "tiny-random", "dtype": "float32", "num_threads": 1},  # the same numerics on every host and load
    "lora": {"rank": 4, "alpha": 8, "init_b_std": 0.05},
    "population": {"teachers": 2, "students": 2},
    "run": {"steps": 4, "seed": 0},
    "selfplay": {
        "proposals_per_teacher": 2,
        "samples_per_problem": 3,
        "roles": {"teacher": {"max_new_tokens": 12}, "student": {"max_new_tokens": 8}},
    },
    "learner": {"lr": 1e-2},
    "evolution": {"every": 1, "gamma": 0.5, "crossover_rate": 0.5},
    "eval": {"limit": 4, "max_new_tokens": 6},
}
"""A 4-step run of 2 teachers + 2 students on the tiny random model: a config dict for ``config_from_dict``."""


def config_with(**sections):
    """The :data:`TINY_OVERRIDES` config with each named section updated by its mapping
    (``config_with(evolution={"fitness": "validation"})``), validated into a ``Config``."""
    import copy

    from evolora.config import config_from_dict

    data = copy.deepcopy(TINY_OVERRIDES)
    for key, value in sections.items():
        data.setdefault(key, {}).update(value)
    return config_from_dict(data)


def judged_toy():
    """The toy task with every answer graded (even length: correct, odd: wrong) and a verdict read
    from the critic text's length, so both classes and both verdicts occur on random weights."""
    from evolora.tasks.base import Grade
    from evolora.tasks.toy import ToyTask

    class JudgedToy(ToyTask):
        def grade(self, completion, answer):
            return Grade("correct" if len(completion) % 2 == 0 else "wrong", 0.0)

        def parse_verdict(self, text):
            return (None, "correct", "incorrect")[len(text) % 3]

    return JudgedToy(max_problem_chars=40)


def finished_arith_run(tiny_config, out, mode: str = "population"):
    """A finished 1-step arith run of ``tiny_config`` in ``out`` (``mode``: population or single_agent):
    (the :class:`evolora.run.Run`, its held-out results)."""
    from evolora.model import load_base
    from evolora.run import Run
    from evolora.tasks import ArithTask

    config = tiny_config.model_copy(
        update={
            "task": tiny_config.task.model_copy(update={"name": "arith", "params": {}}),
            "selfplay": tiny_config.selfplay.model_copy(update={"mode": mode}),
            "run": tiny_config.run.model_copy(update={"steps": 1}),
        }
    )
    model, tokenizer = load_base("tiny-random")
    run = Run(config, out, model=model, tokenizer=tokenizer, task=ArithTask())
    run.train([])
    return run, run.finish()["held_out"]


TOY_ARGS = [
    "--set",
    "model.name=tiny-random",
    "--set",
    "model.dtype=float32",
    "--set",
    "lora.rank=2",
    "--set",
    "task.name=toy",
    "--set",
    "task.params={}",
    "--set",
    "selfplay.proposals_per_teacher=2",
    "--set",
    "selfplay.samples_per_problem=2",
    "--set",
    "selfplay.roles.teacher.max_new_tokens=6",
    "--set",
    "selfplay.roles.student.max_new_tokens=4",
    "--set",
    "evolution.every=1",
    "--set",
    "eval.limit=2",
    "--set",
    "eval.max_new_tokens=4",
    "--set",
    "run.steps=2",
]
"""``evolora evolve`` options of a finished 2-step toy run on the tiny model (seconds)."""


def finished_cli_run(out):
    """Run ``evolora evolve tasks/gsm.yaml --out OUT`` with :data:`TOY_ARGS` in process; return ``out``."""
    from typer.testing import CliRunner

    from evolora.cli import app

    result = CliRunner().invoke(app, ["evolve", "tasks/gsm.yaml", "--out", str(out), *TOY_ARGS])
    assert result.exit_code == 0, result.output
    return out


def tree_digest(root) -> dict[str, str]:
    """{relative path: sha256} of every file under ``root`` except the lock file: what "nothing
    already written is lost" compares."""
    import hashlib
    from pathlib import Path

    root = Path(root)
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def benchmark_module(name: str):
    """The script ``benchmarks/<name>.py`` imported as a module (its functions, without running ``main``);
    its imports of sibling helpers (``_timing``, ``_pair``) resolve as when the script runs."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def run_benchmark(script: str, *args: str, timeout: int = 300) -> str:
    """The stdout of ``python benchmarks/SCRIPT ARGS``, which must exit 0 (else its output's tails)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout
