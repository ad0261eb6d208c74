"""`evolora report` / `compare` on fabricated run directories with known numbers.

Three population seeds and two single-agent seeds (finished), plus one unfinished population
run (no final/). Every expected number below is computed by hand from what the fixture writes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats
from typer.testing import CliRunner

from evolora.cli import app
from evolora.report import write_report
from evolora.report.data import held_out_groups, load_run, slope, summarize, t_interval
from evolora.report.plots import FIGURES

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STEPS = 4
# seed -> (base, {member: held-out accuracy}, depth slope); depth(step) = 1 + slope * step
POPULATION = {
    0: (0.2, {"s0": 0.3, "s1": 0.5}, 0.5),
    1: (0.2, {"s0": 0.4, "s1": 0.6}, 0.7),
    2: (0.1, {"s0": 0.45, "s1": 0.55}, 0.3),
}
SINGLE = {0: (0.2, {"a0": 0.35}, 0.1), 1: (0.2, {"a0": 0.45}, 0.2)}


def _ratings(mode: str, step: int) -> dict:
    if mode == "single_agent":  # stays at the prior
        return {"a0": {"role": "agent", "mu": 25.0, "sigma": 25 / 3, "elo": 1000.0}}
    ids = {
        "t0": "teacher",
        "t1": "teacher" if step < 2 else None,
        "t2": "teacher" if step >= 2 else None,
        "s0": "student",
        "s1": "student",
    }
    return {
        i: {"role": r, "mu": 25.0 + step * (1 if r == "teacher" else -1), "sigma": 8.0 - step * 0.5, "elo": 1000.0}
        for i, r in ids.items()
        if r
    }


def make_run(root, name: str, mode: str | None, seed: int, held: tuple | None) -> str:
    """Write config.yaml, metrics.jsonl, matches.jsonl and (when ``held``) final/summary.json."""
    run = root / name
    (run / "final").mkdir(parents=True) if held else run.mkdir(parents=True)
    selfplay = {"proposals_per_teacher": 2} if mode is None else {"mode": mode}
    run.joinpath("config.yaml").write_text(
        yaml.safe_dump({"run": {"steps": STEPS, "seed": seed}, "task": {"name": "arith"}, "selfplay": selfplay})
    )
    depth_slope = (held or (0, {}, 0.25))[2]
    single = mode == "single_agent"
    teacher, student = ("a0", "a0") if single else ("t0", "s1")
    records, games = [], []
    for step in range(1, STEPS + 1):
        births = (
            []
            if single or step != 2
            else [
                {
                    "step": 2,
                    "role": "teacher",
                    "replaced": "t1",
                    "child": "t2",
                    "parents": ["t0"],
                    "operator": "lowrank_gaussian",
                }
            ]
        )
        records.append(
            {
                "step": step,
                "validity_rate": 0.25 * step,
                "solve_rate": None if step == 1 else 0.5,
                "format_error_rate": 0.0,
                "pair_solve_rates": {f"{teacher}|{student}": 0.5},
                "reward": {"teacher": 0.1},
                "ratings": _ratings("single_agent" if single else "population", step),
                "births": births,
                "seconds": {"total": 1.0},
                "complexity": {"count": 2, "depth": 1 + depth_slope * step, "digits": 2.0},
                "coverage": step * 3,
                "matchup": {teacher: {student: 0.5}},
                "response_length": {
                    "teacher": {"count": 2, "mean": 10.0 + step, "median": 10, "min": 8, "max": 14},
                    "student": {"count": 4, "mean": 20.0 - step, "median": 20, "min": 9, "max": 24},
                },
                "entropy": {teacher: 1.0},
                "mean_entropy": 2.0 - 0.1 * step,
                "trained_samples": {teacher: 4},
            }
        )
        games += [
            {
                "step": step,
                "teacher": teacher,
                "student": student,
                "problem": "1 + 2",
                "program": "1 + 2",
                "valid": True,
                "reason": "ok",
                "grades": ["correct", "wrong"],
            },
            {
                "step": step,
                "teacher": "t1" if not single else "a0",
                "student": "s0" if not single else "a0",
                "problem": None,
                "program": None,
                "valid": False,
                "reason": "parse",
                "grades": [],
            },
        ]
    run.joinpath("metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 5, "vali')
    run.joinpath("matches.jsonl").write_text("".join(json.dumps(g) + "\n" for g in games))
    if held:
        base, members, _ = held
        role = "agent" if single else "student"
        individuals = [
            {
                "id": i,
                "role": role,
                "mu": 25.0,
                "sigma": 8.0,
                "elo": 1000.0,
                "parents": [],
                "operator": "init",
                "born_step": 0,
                "held_out": {"correct": 0, "total": 20, "accuracy": a},
            }
            for i, a in members.items()
        ]
        if not single:
            individuals += [{"id": "t0", "role": "teacher", "held_out": None}]
        lineage = (
            [{"id": "a0", "role": "agent", "slot": "A0", "parents": [], "operator": "init", "born_step": 0, "step": 0}]
            if single
            else [
                {
                    "id": i,
                    "role": "teacher" if i[0] == "t" else "student",
                    "slot": i.upper(),
                    "parents": [],
                    "operator": "init",
                    "born_step": 0,
                    "step": 0,
                }
                for i in ("t0", "t1", "s0", "s1")
            ]
            + [
                {
                    "id": "t2",
                    "role": "teacher",
                    "slot": "T1",
                    "parents": ["t0"],
                    "operator": "lowrank_gaussian",
                    "born_step": 2,
                    "step": 2,
                }
            ]
        )
        held_out = {i: {"correct": round(a * 20), "total": 20, "accuracy": a} for i, a in members.items()}
        held_out["base"] = {"correct": round(base * 20), "total": 20, "accuracy": base}
        for entry in held_out.values():  # two groups of 10: all of the correct ones in the first, up to 10
            first = min(entry["correct"], 10)
            entry["by_group"] = {
                "d1o1": {"correct": first, "total": 10},
                "d2o1": {"correct": entry["correct"] - first, "total": 10},
            }
        summary = {
            "steps": STEPS,
            "model": "tiny-random",
            "task": "arith",
            "individuals": individuals,
            "held_out": held_out,
            "lineage": lineage,
        }
        if single:
            summary["mode"] = "single_agent"
        run.joinpath("final", "summary.json").write_text(json.dumps(summary))
    return str(run)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    population = [
        make_run(root, f"pop{s}", None if s == 0 else "population", s, held)  # seed 0: no mode key
        for s, held in POPULATION.items()
    ]
    single = [make_run(root, f"single{s}", "single_agent", s, held) for s, held in SINGLE.items()]
    unfinished = make_run(root, "unfinished", "population", 7, None)
    return {"root": root, "population": population, "single": single, "unfinished": unfinished}


@pytest.fixture(scope="module")
def report(runs):
    out = runs["root"] / "report"
    return write_report(runs["population"] + runs["single"] + [runs["unfinished"]], out)


def _interval(values):
    mean = np.mean(values)
    half = stats.t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def test_load_run_reads_mode_seed_steps_and_missing(runs):
    run = load_run(runs["population"][0])
    assert (run.mode, run.task, run.seed, run.steps, run.finished) == ("population", "arith", 0, STEPS, True)
    assert len(run.metrics) == STEPS  # the partial last line is dropped
    assert load_run(runs["single"][1]).mode == "single_agent"
    unfinished = load_run(runs["unfinished"])
    assert not unfinished.finished and unfinished.steps == STEPS
    assert any("final/summary.json is missing" in note for note in unfinished.missing)
    lineage = {n["id"]: n for n in unfinished.lineage()}  # rebuilt from births
    assert set(lineage) == {"t0", "t1", "s0", "s1", "t2"}
    assert lineage["t2"]["parents"] == ["t0"] and lineage["t2"]["born_step"] == 2


def test_summarize_matches_a_hand_computation(runs):
    summary = summarize([load_run(p) for p in runs["population"] + runs["single"] + [runs["unfinished"]]])
    assert summary["complexity_metric"] == "depth"
    pop, single = summary["arms"]["population"], summary["arms"]["single_agent"]
    assert pop["runs"] == 4 and pop["seeds"] == [0, 1, 2, 7]
    # held-out: the unfinished run has none, so n = 3
    for key, values in (("best", [0.5, 0.6, 0.55]), ("mean", [0.4, 0.5, 0.5]), ("base", [0.2, 0.2, 0.1])):
        mean, low, high = _interval(values)
        assert pop[key]["n"] == 3
        assert pop[key]["mean"] == pytest.approx(mean)
        assert pop[key]["low"] == pytest.approx(max(low, 0.0)) and pop[key]["high"] == pytest.approx(high)
    # complexity slope: exact linear series per run (the unfinished one has slope 0.25)
    mean, low, high = _interval([0.5, 0.7, 0.3, 0.25])
    assert pop["complexity_slope"]["values"] == pytest.approx([0.5, 0.7, 0.3, 0.25])
    assert (pop["complexity_slope"]["low"], pop["complexity_slope"]["high"]) == pytest.approx((low, high))
    # single agent: best = mean = the agent; two seeds, t(0.975, 1) = 12.7 -> clipped to [0, 1]
    assert single["best"]["mean"] == pytest.approx(0.4) and single["mean"]["mean"] == pytest.approx(0.4)
    assert (single["best"]["low"], single["best"]["high"]) == (0.0, 1.0)
    assert single["complexity_slope"]["mean"] == pytest.approx(0.15)
    # validity 0.25 * step over steps 1..4 -> 0.625; solve rate None at step 1 is skipped -> 0.5
    assert pop["validity"]["mean"] == pytest.approx(0.625) and pop["solve_rate"]["mean"] == pytest.approx(0.5)


def test_paired_differences_match_by_seed(runs):
    summary = summarize([load_run(p) for p in runs["population"] + runs["single"]])
    paired = summary["paired"]
    assert paired["seeds"] == [0, 1]  # seed 2 has no single-agent twin
    # member mean: pop (0.4, 0.5) - agent (0.35, 0.45); best: (0.5, 0.6) - (0.35, 0.45); slopes (0.5, 0.7) - (0.1, 0.2)
    for key, diffs in (("mean", [0.05, 0.05]), ("best", [0.15, 0.15]), ("complexity_slope", [0.4, 0.5])):
        assert paired[key]["values"] == pytest.approx(diffs)
    mean, low, high = _interval([0.4, 0.5])
    assert (
        paired["complexity_slope"]["mean"],
        paired["complexity_slope"]["low"],
        paired["complexity_slope"]["high"],
    ) == pytest.approx((mean, low, high))
    assert summarize([load_run(p) for p in runs["population"]])["paired"] is None


def test_statistics_helpers():
    assert slope([1, 2, 3, 4], [3.0, 5.0, None, 9.0]) == pytest.approx(2.0)
    assert slope([1, 1], [1.0, 2.0]) is None
    one = t_interval([0.3, None, float("nan")])
    assert one["mean"] == pytest.approx(0.3) and one["low"] is None and one["n"] == 1
    assert t_interval([])["mean"] is None
    mean, low, high = _interval([1.0, 2.0, 4.0])
    got = t_interval([1.0, 2.0, 4.0])
    assert (got["mean"], got["low"], got["high"]) == pytest.approx((mean, low, high))


def test_report_writes_pngs_and_a_self_contained_page(report, runs):
    html = report.read_text()
    assert report.name == "report.html"
    for name, _, _ in FIGURES:
        png = report.parent / f"{name}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC, name
    assert html.count('src="data:image/png;base64,') == len(FIGURES)
    assert 'src="http' not in html and "<link" not in html and "<script" not in html
    for path in runs["population"] + runs["single"]:
        assert f"<td>{path}</td>" in html
    assert "single_agent" in html and "<th>seed</th>" in html
    assert "Held-out accuracy is missing for" in html and "unfinished" in html
    assert "55.0% [" in html  # population best member mean over three seeds
    assert "paired by seed" in html and "<td>0, 1</td>" in html
    saved = json.loads((report.parent / "report.json").read_text())
    assert saved["arms"]["single_agent"]["best"]["mean"] == pytest.approx(0.4)


def test_unfinished_run_alone_still_renders(runs, tmp_path):
    page = write_report([runs["unfinished"]], tmp_path / "alone")
    html = page.read_text()
    assert "Held-out accuracy is missing" in html and "held_out: not drawn" in html
    assert "held_out: not drawn, no run here has a held-out evaluation" in html  # says why, and the fix
    assert "evolora evaluate RUN_DIR adds one to a finished run" in html
    assert html.count("data:image/png;base64,") == len(FIGURES) - 2  # neither held-out figure
    assert not (tmp_path / "alone" / "held_out.png").exists()
    assert not (tmp_path / "alone" / "held_out_groups.png").exists()


def test_held_out_groups_are_means_of_the_base_and_each_arms_best_member(runs):
    loaded = [load_run(p) for p in runs["population"] + runs["single"] + [runs["unfinished"]]]
    table = held_out_groups(loaded)
    # base: 0.2, 0.2, 0.1 (population), 0.2, 0.2 (single) of 20 -> 4, 4, 2, 4, 4 correct, all in d1o1
    assert table["base"] == pytest.approx({"d1o1": (4 + 4 + 2 + 4 + 4) / 5 / 10, "d2o1": 0.0})
    # best population members: s1 with 0.5, 0.6, 0.55 -> 10, 12, 11 correct: d1o1 10 each, d2o1 0, 2, 1
    assert table["population"] == pytest.approx({"d1o1": 1.0, "d2o1": (0 + 2 + 1) / 3 / 10})
    # the single agent: 0.35, 0.45 -> 7, 9 correct, all in d1o1
    assert table["single_agent"] == pytest.approx({"d1o1": (7 + 9) / 2 / 10, "d2o1": 0.0})
    assert held_out_groups([runs_ for runs_ in loaded if not runs_.finished]) == {}


def test_bad_paths_raise(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_run(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty is not a run directory"):
        load_run(tmp_path / "empty")


@pytest.mark.slow
def test_cli_report_and_compare(runs, tmp_path):
    cli = CliRunner()
    result = cli.invoke(app, ["report", runs["unfinished"]])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().endswith("unfinished/report/report.html")
    result = cli.invoke(app, ["compare", runs["population"][0], runs["single"][0], "--out", str(tmp_path / "cmp")])
    assert result.exit_code == 0, result.output
    assert "single_agent" in result.stdout and "population" in result.stdout
    assert "paired by seed [0]" in result.stdout  # pop 0.4 - agent 0.35 on seed 0
    assert "member mean 5.0% (n=1)" in result.stdout
    assert (tmp_path / "cmp" / "report.html").exists()
    for args in (
        ["report", str(tmp_path / "nowhere")],
        ["compare", runs["population"][0]],
        ["compare", runs["population"][0], str(tmp_path / "nowhere")],
    ):
        result = cli.invoke(app, args)
        assert result.exit_code == 2, args
    assert "nowhere" in cli.invoke(app, ["report", str(tmp_path / "nowhere")]).output


def test_report_draws_the_breeders_equation_of_recorded_runs(tmp_path):
    calibration = Path(__file__).parents[1] / "docs/results/data/study-evolution/calibration"
    page = write_report([calibration / "population-s100", calibration / "population-s101"], tmp_path)
    assert (page.parent / "breeding.png").read_bytes()[:8] == PNG_MAGIC
    breeding = json.loads((page.parent / "report.json").read_text())["breeding"]
    # the calibration's 8 events (4 per run): realised S on audited held-out accuracy > 0 at 4 of them
    assert breeding["held_out"]["events"] == 8 and breeding["held_out"]["positive"] == pytest.approx(0.5)
    assert breeding["accuracy"]["events"] == 8 and breeding["accuracy"]["S"] > 0
    assert '<figure id="breeding"><img alt="breeding" src="data:image/png;base64,' in page.read_text()
