"""benchmarks/member_spread.py: the best, mean and worst member and the per-cell member mean of a
study's arms, on the outer-loop study's committed records (docs/results/evolution.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_helpers import benchmark_module, run_benchmark

from evolora.report.data import load_run

STUDY = Path(__file__).resolve().parents[1] / "docs/results/data/study-evolution"


def test_the_records_give_the_figures_on_the_results_page():
    runs = [load_run(STUDY / f"{arm}-s{seed}") for arm in ("population", "no_evolution") for seed in range(8)]
    spread = benchmark_module("member_spread").member_spread(runs)
    assert spread["population"]["runs"] == spread["no_evolution"]["runs"] == 8
    assert spread["population"]["worst"] == pytest.approx(0.23125, abs=5e-4)
    assert spread["no_evolution"]["worst"] == pytest.approx(0.1646, abs=5e-4)
    assert spread["no_evolution"]["groups"]["d1o1"] == pytest.approx(0.616, abs=5e-4)
    for row in spread.values():  # the member mean is the mean of the cells (68 items each)
        assert row["mean"] == pytest.approx(sum(row["groups"].values()) / 4)
        assert row["worst"] <= row["mean"] <= row["best"]


def test_one_adapter_is_its_own_best_and_worst_member():
    out = run_benchmark("member_spread.py", str(STUDY), "--arms", "single_agent_total", "--seeds", "0-1")
    row = next(line for line in out.splitlines() if line.startswith("| single_agent_total"))
    best, mean, worst = row.split(" | ")[2:5]
    assert best == mean == worst
