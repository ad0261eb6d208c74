"""The study tables over the recorded study runs (no model): the sampled pass@k section."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evolora.report.data import load_run
from evolora.report.study_figures import pass_at_k_curves, pass_at_k_figure
from evolora.report.study_tables import select_runs, study_tables

RECORDS = Path(__file__).resolve().parents[1] / "docs" / "results" / "data" / "study-arith"


def _copy(tmp_path, names):
    for name in names:
        shutil.copytree(RECORDS / name, tmp_path / name)
    return [load_run(tmp_path / name) for name in names]


def test_no_pass_at_k_section_without_sampled_evaluations(tmp_path):
    tables = study_tables(_copy(tmp_path, ["population-s1", "single_agent-s1"]))  # records without pass@k
    assert "| population |" in tables.markdown and "| samples | k |" not in tables.markdown


def test_pass_at_k_section_averages_base_members_and_best(tmp_path):
    _copy(tmp_path, ["population-s0", "population-s1"])
    for seed, (base, members) in enumerate([(0.2, {"S0-1": 0.3, "S1-1": 0.5}), (0.4, {"S0-1": 0.1, "S1-1": 0.3})]):
        path = tmp_path / f"population-s{seed}" / "final" / "summary.json"
        summary = json.loads(path.read_text())
        summary["pass_at_k"] = {
            "samples": 4,
            "members": {
                "base": {"pass@1": base, "pass@4": 2 * base},
                **{m: {"pass@1": v, "pass@4": 2 * v} for m, v in members.items()},
            },
        }
        path.write_text(json.dumps(summary))
    markdown = study_tables([load_run(tmp_path / f"population-s{s}") for s in (0, 1)]).markdown
    # base (0.2 + 0.4) / 2; member means 0.4 and 0.2 -> 0.3; best 0.5 and 0.3 -> 0.4
    assert "| population | 2 | 4 | 1 | 30.0 | 30.0 | 40.0 |" in markdown
    assert "| population | 2 | 4 | 4 | 60.0 | 60.0 | 80.0 |" in markdown


def test_select_runs_keeps_the_given_arms_and_seeds_in_the_given_order(tmp_path):
    runs = _copy(tmp_path, ["population-s0", "population-s1", "single_agent-s0", "single_agent-s1"])
    picked = select_runs(runs, arms=["single_agent", "population"], seeds=[1])
    assert [(run.mode, run.seed) for run in picked] == [("single_agent", 1), ("population", 1)]
    markdown = study_tables(picked).markdown
    assert "| population − single_agent | 1 (n = 1) |" in markdown and "\n| 0 | " not in markdown  # no seed-0 row
    assert select_runs(runs) == runs


def test_a_reference_arm_other_than_the_population(tmp_path):
    runs = _copy(tmp_path, ["population-s0", "population-s1", "single_agent-s0", "single_agent-s1"])
    default, swapped = study_tables(runs).markdown, study_tables(runs, reference="single_agent").markdown
    assert "| single_agent − population | 0, 1 (n = 2) |" in swapped and "population − single_agent" not in swapped
    row = lambda md, name: next(line for line in md.splitlines() if line.startswith(f"| {name} | 0, 1"))  # noqa: E731
    first = lambda md, name: row(md, name).split(" | ")[2].split(" ")[0]  # noqa: E731  the mean difference
    assert float(first(swapped, "single_agent − population")) == -float(first(default, "population − single_agent"))


def test_pass_at_k_curves_average_the_base_and_the_best_member_by_pass_at_1(tmp_path):
    runs = _copy(tmp_path, ["population-s0", "single_agent-s1"])  # only population-s0 has pass@k
    members = runs[0].summary["pass_at_k"]["members"]
    best = max((v for name, v in members.items() if name != "base"), key=lambda v: v["pass@1"])
    curves = pass_at_k_curves(runs)
    assert list(curves) == ["population"] and curves["population"]["k"] == [1, 2, 4, 8, 16]
    assert curves["population"]["best member"][-1] == best["pass@16"]
    assert curves["population"]["base"][0] == members["base"]["pass@1"]
    assert pass_at_k_figure(runs, tmp_path / "k.png").stat().st_size > 1000
    assert pass_at_k_figure(runs[1:], tmp_path / "none.png") is None and not (tmp_path / "none.png").exists()


def _fake_run(tmp_path, arm, seed, accuracy, rating, dev, items=None, rollouts=72):
    from evolora.report.data import RunData

    held = {
        m: {"accuracy": a, "correct": 0, "total": 4, **({"items": items[m]} if items else {})}
        for m, a in accuracy.items()
    }
    held["base"] = {"accuracy": 0.1, "correct": 0, "total": 4}
    summary = {
        "individuals": [{"id": m, "role": "student"} for m in accuracy],
        "held_out": held,
        "fitness": {
            "name": "rating",
            "members": {
                m: {"role": "student", "rating": rating[m], "validation": dev[m], "fitness": rating[m]}
                for m in accuracy
            },
        },
    }
    metrics = [
        {
            "step": s,
            "rollouts": rollouts,
            "trained_samples": {"s0": 10, "s1": 5},
            "tokens": 100,
            "seconds": {"total": 30.0},
        }
        for s in (1, 2)
    ]
    return RunData(tmp_path / f"{arm}-s{seed}", {}, arm, "arith", seed, metrics, [], summary)


def test_study_tables_give_compute_fitness_validity_and_item_intervals(tmp_path):
    from evolora.report.study_tables import study_tables

    runs = []
    for seed in range(3):
        accuracy = {"s0": 0.5, "s1": 0.25}
        items = {"s0": "1100", "s1": "1000"}
        # dev accuracy orders the members like held-out accuracy; the rating orders them the other way
        runs.append(
            _fake_run(tmp_path, "population", seed, accuracy, {"s0": 1.0, "s1": 2.0}, {"s0": 0.6, "s1": 0.2}, items)
        )
        runs.append(
            _fake_run(
                tmp_path,
                "single_agent_total",
                seed,
                {"s0": 0.25, "s1": 0.25},
                {"s0": 1.0, "s1": 1.0},
                {"s0": 0.3, "s1": 0.3},
                {"s0": "1000", "s1": "1000"},
                rollouts=70,
            )
        )
    markdown = study_tables(runs).markdown
    assert "| population | 3 | 144 | 30 | 200 | 1 |" in markdown  # rollouts, trained samples, tokens, minutes
    assert "| single_agent_total | 3 | 140 |" in markdown
    assert "| population | dev accuracy | 3 | 6 | +1.00 | 3 / 0 / 0 |" in markdown
    assert "| population | μ − 3σ | 3 | 6 | -1.00 | 0 / 3 / 0 |" in markdown
    assert "fitness (selected on)" not in markdown  # a rating fitness repeats the μ − 3σ row
    row = next(line for line in markdown.splitlines() if line.startswith("| population − single_agent_total"))
    assert row.endswith(
        "| +12.5 [+0.0, +37.5] |"
    )  # item × seed bootstrap: the t interval of 3 equal seeds has no width
    # the same numbers unrounded, with the runs that were left out named
    from evolora.report.study_stats import study_stats

    unfinished = _fake_run(tmp_path, "population", 7, {"s0": 0.5}, {"s0": 1.0}, {"s0": 0.5})
    unfinished.summary = None
    stats = study_stats([*runs, unfinished], study_tables(runs).by_arm, "population")
    assert stats["runs"]["population"] == {"finished": [0, 1, 2], "unfinished": [7]}
    (comparison,) = stats["comparisons"]
    assert comparison["comparison"] == "population − single_agent_total" and comparison["seeds"] == [0, 1, 2]
    assert comparison["mean"]["mean"] == pytest.approx(0.125) and comparison["bootstrap"]["low"] == pytest.approx(0.0)
    assert stats["fitness_rho"]["population"]["validation"]["rho"] == pytest.approx(1.0)
    json.dumps(stats)  # JSON-ready as written


def test_an_arm_with_no_seed_in_common_keeps_the_comparison_table_rectangular(tmp_path):
    runs = [
        _fake_run(tmp_path, arm, seed, {"s0": 0.5}, {"s0": 1.0}, {"s0": 0.5})
        for arm, seeds in (("population", (0, 1)), ("late", (5, 6)))
        for seed in seeds
    ]
    for reference in ("population", "absent"):
        blocks = study_tables(runs, reference=reference).markdown.split("\n\n")
        table = next(block for block in blocks if block.startswith("| comparison |")).splitlines()
        assert any("none in common" in line for line in table[2:])
        assert {line.count("|") for line in table} == {table[0].count("|")}
