"""Operator sweeps: variants are valid configs, one row per (variant, seed), aggregates and a plot."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib
import pytest
import torch

from evolora.config import ConfigError, load_config
from evolora.integrations.sweep import OUTCOMES, aggregate, plot_sweep, run_sweep, selection_variants

pytestmark = pytest.mark.slow  # over ~5 s each: CI runs them, `-m "not slow"` skips them

torch.set_num_threads(1)
GSM_YAML = Path(__file__).resolve().parents[1] / "tasks" / "gsm.yaml"
FAST = [
    "model.name=tiny-random",
    "model.num_threads=1",
    "run.steps=1",
    "population.teachers=3",
    "population.students=3",
    "evolution.every=1",
    "evolution.at_last_step=true",
    "evolution.gamma=0.34",
    "selfplay.samples_per_problem=2",
    "selfplay.roles.teacher.max_new_tokens=8",
    "selfplay.roles.student.max_new_tokens=8",
    "eval.limit=0",
]


def test_selection_variants_are_valid_configs():
    variants = selection_variants(
        tournament_sizes=(2, 5), truncation_fractions=(0.25,), temperatures=(0.1,), pfsp_weightings=("hard",)
    )
    assert list(variants) == ["tournament k=2", "tournament k=5", "truncation 0.25", "softmax T=0.1", "pfsp hard"]
    configs = {label: load_config(GSM_YAML, [*FAST, *extra]) for label, extra in variants.items()}
    assert configs["tournament k=5"].evolution.selection.params == {"k": 5}
    assert configs["truncation 0.25"].evolution.selection.name == "truncation"
    assert configs["softmax T=0.1"].evolution.selection.params == {"temperature": 0.1}
    assert configs["pfsp hard"].selfplay.matchmaking.weighting == "hard"
    only_pfsp = selection_variants(
        tournament_sizes=(), truncation_fractions=(), temperatures=(), pfsp_weightings=("uniform",)
    )
    assert only_pfsp == {"pfsp uniform": ["selfplay.matchmaking.weighting=uniform"]}


def test_run_sweep_rows_summary_and_plot(tmp_path):
    matplotlib.use("Agg")
    variants = selection_variants(
        tournament_sizes=(2,), truncation_fractions=(0.5,), temperatures=(), pfsp_weightings=()
    )
    rows = run_sweep(GSM_YAML, variants, seeds=[0, 1], out_dir=tmp_path, overrides=FAST)
    assert [(r["variant"], r["seed"]) for r in rows] == [
        ("tournament k=2", 0),
        ("tournament k=2", 1),
        ("truncation 0.5", 0),
        ("truncation 0.5", 1),
    ]
    assert all(set(OUTCOMES) <= set(r) for r in rows)
    assert all(r["births"] == 4 for r in rows)  # 1 evolution x 2 roles x ceil(0.34 * 3)
    assert (tmp_path / "truncation_0.5" / "seed1" / "final" / "summary.json").exists()
    summary = json.loads((tmp_path / "final" / "summary.json").read_text())
    assert len(summary["rows"]) == 4 and summary["seeds"] == [0, 1]
    ax = plot_sweep(rows, "validity_rate")
    assert [t.get_text() for t in ax.get_xticklabels()] == ["tournament k=2", "truncation 0.5"]


def test_bad_variant_fails_before_any_run(tmp_path):
    variants = {"ok": [], "typo": ["evolution.selection={name: tournament, params: {kk: 2}}"]}
    with pytest.raises(ConfigError, match="unknown parameter 'kk'"):
        run_sweep(GSM_YAML, variants, seeds=[0], out_dir=tmp_path, overrides=FAST)
    assert not any(tmp_path.iterdir())


def test_aggregate_ignores_nan():
    rows = [
        {"variant": "a", "x": 1.0},
        {"variant": "a", "x": 3.0},
        {"variant": "a", "x": math.nan},
        {"variant": "b", "x": math.nan},
    ]
    table = aggregate(rows, "x")
    assert table["a"] == (2.0, 1.0, 2)
    assert math.isnan(table["b"][0]) and table["b"][2] == 0
