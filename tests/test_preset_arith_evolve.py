"""The ``arith_evolve`` preset is the outer-loop study's ``population`` arm (docs/results/evolution.md):
``tasks/arith.yaml`` with the overrides of ``benchmarks/evolution_study.sh``, less its one thread and
its held-out audit at every event."""

from __future__ import annotations

from evolora.config import load_config

STUDY_OVERRIDES = [  # benchmarks/evolution_study.sh SEED OUT population 50, at the study's commit
    "model.dtype=float32",
    "run.steps=50",
    "population.teachers=4",
    "population.students=4",
    "selfplay.proposals_per_teacher=2",
    "evolution.every=5",
    "evolution.gamma=0.5",
    "evolution.elitism=1",
    "evolution.child_rating=inherit",
    'evolution.fitness={"name": "exam", "problems": 64, "size": 64, "score": "accuracy"}',
    'task.params.eval_cells=["d1o1", "d1o2", "d1o3", "d2o1"]',
    "task.params.eval_per_cell=68",
    "task.params.eval_seed=1",
    "eval.limit=272",
]


def test_the_preset_is_the_study_arm_that_acted():
    preset = load_config("arith_evolve").model_dump()
    study = load_config("arith", STUDY_OVERRIDES).model_dump()
    study.pop("study")
    preset.pop("study")
    assert preset == study
    assert preset["evolution"]["fitness"]["name"] == "exam"
    assert preset["evolution"]["audit"] == 0  # the study audited 68 items; measurement only


def test_its_loop_makes_nine_events_each_replacing_half_of_a_role():
    config = load_config("arith_evolve")
    assert (config.run.steps - 1) // config.evolution.every == 9
    assert config.evolution.gamma * config.population.students == 2
