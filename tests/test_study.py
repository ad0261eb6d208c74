"""`evolora study`: every seed × arm on the tiny model, finished runs skipped, started ones resumed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from evolora.cli import app
from evolora.config import ConfigError
from evolora.study import parse_arms, parse_seeds, study_plan

runner = CliRunner()
TINY = [
    "--set",
    "model.name=tiny-random",
    "--set",
    "lora.rank=2",
    "--set",
    "task.name=toy",
    "--set",
    "task.params={}",
    "--set",
    "selfplay.roles.teacher.max_new_tokens=6",
    "--set",
    "selfplay.roles.student.max_new_tokens=4",
    "--set",
    "eval.limit=3",
    "--set",
    "eval.max_new_tokens=4",
    "--set",
    "run.steps=2",
    "--set",
    "evolution.every=1",
]


def test_parse_seeds_and_arms():
    assert parse_seeds("0,1,2") == [0, 1, 2] == parse_seeds("0-2")
    assert parse_seeds("3, 5-6") == [3, 5, 6]
    for bad in ("a", "1,1", "", "-1", "0-2,2"):
        with pytest.raises(ConfigError, match="--seeds"):
            parse_seeds(bad)
    with pytest.raises(ConfigError, match="must ascend.*'2-0'"):
        parse_seeds("2-0")
    assert parse_seeds("1-1") == [1]
    assert parse_arms("single_agent,population") == ["single_agent", "population"]
    with pytest.raises(ConfigError, match="--arms"):
        parse_arms("population,population")
    with pytest.raises(ConfigError, match="unknown arm 'duel'"):
        study_plan("tasks/arith.yaml", seeds=[0], arms=["population", "duel"], out="unused")


@pytest.mark.slow
def test_study_runs_every_seed_and_arm_then_skips_or_resumes(tmp_path, single_thread):
    out = tmp_path / "study"
    args = ["study", "tasks/arith.yaml", "--seeds", "0,1", "--out", str(out), *TINY]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    dirs = {f"{arm}-s{seed}" for arm in ("population", "single_agent") for seed in (0, 1)}
    assert {p.name for p in out.iterdir() if p.is_dir()} == dirs | {"report"}
    for name in dirs:
        summary = json.loads((out / name / "final" / "summary.json").read_text())
        arm, seed = name.rsplit("-s", 1)
        assert (summary["mode"], summary["seed"], summary["steps"]) == (arm, int(seed), 2)
        if arm == "population":  # ΔW diversity per role: distinct members, none identical
            assert set(summary["diversity"]) == {"teacher", "student"} and min(summary["diversity"].values()) > 0.01
        else:
            assert summary["diversity"] == {}
    assert "single_agent" in result.stdout and "population" in result.stdout and "best − base" in result.stdout
    assert (out / "report" / "report.html").is_file()
    assert "| population − single_agent | 0, 1 (n = 2) |" in (out / "report" / "tables.md").read_text()
    assert (out / "report" / "arms.png").stat().st_size > 1000
    learning = subprocess.run(
        [sys.executable, "benchmarks/learning.py", str(out / "population-s0"), str(out / "population-s1")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert learning.returncode == 0, learning.stderr
    assert "population-s0: steps 2," in learning.stdout and "mean over 2 runs: base" in learning.stdout
    summary_path = out / "population-s0" / "final" / "summary.json"
    summary = json.loads(summary_path.read_text())
    base = summary["held_out"]["base"]
    assert f"  held-out by member: base {base['correct']}/{base['total']}, " in learning.stdout
    assert "by_group" not in base and "  d1o1:" not in learning.stdout  # the toy task has no groups
    sys.path.insert(0, "benchmarks")
    from learning import member_lines

    summary["held_out"]["base"]["by_group"] = {"d1o1": {"correct": 2, "total": 2}, "d2o1": {"correct": 0, "total": 1}}
    summary_path.write_text(json.dumps(summary))
    lines = member_lines(out / "population-s0")
    assert lines[1:] == ["  d1o1: base 2/2", "  d2o1: base 0/1"]  # groups of the members that have them

    from evolora.report.data import load_run
    from evolora.report.study_figures import study_figure
    from evolora.report.study_tables import study_tables

    tables = study_tables([load_run(out / name) for name in sorted(dirs)])
    assert set(tables.by_arm) == {"population", "single_agent"} and set(tables.by_arm["population"]) == {0, 1}
    assert "| population − single_agent | 0, 1 (n = 2) |" in tables.markdown
    assert study_figure(tables, tmp_path / "arms.png").stat().st_size > 1000

    # a second call skips the finished runs; a run without final/ is resumed from its checkpoint
    stamp = (out / "population-s0" / "final" / "summary.json").stat().st_mtime_ns
    (out / "single_agent-s1" / "final" / "summary.json").unlink()
    plan = study_plan(
        "tasks/arith.yaml", seeds=[0, 1], arms=["population", "single_agent"], out=out, overrides=TINY[1::2]
    )
    assert [(p.arm, p.seed, p.state) for p in plan] == [
        ("population", 0, "done"),
        ("population", 1, "done"),
        ("single_agent", 0, "done"),
        ("single_agent", 1, "resume"),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "resumed at step 2" in result.output
    assert (out / "population-s0" / "final" / "summary.json").stat().st_mtime_ns == stamp
    assert (out / "single_agent-s1" / "final" / "summary.json").is_file()
    lines = (out / "single_agent-s1" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]


def test_study_refuses_a_bad_override_before_any_run(tmp_path):
    result = runner.invoke(
        app, ["study", "tasks/arith.yaml", "--out", str(tmp_path / "s"), *TINY, "--set", "lora.rnak=2"]
    )
    assert result.exit_code == 2 and "lora.rnak" in result.output
    assert not (tmp_path / "s").exists()


def test_study_samples_gives_pass_at_k_of_every_run_with_one_base(tmp_path, single_thread, monkeypatch):
    import evolora.evaluation.sampled as sampled

    calls = []
    original = sampled.correct_counts

    def spy(bank, tokenizer, task, items, slots, **kwargs):
        calls.append(list(slots))
        return original(bank, tokenizer, task, items, slots, **kwargs)

    monkeypatch.setattr(sampled, "correct_counts", spy)
    out = tmp_path / "study"
    args = [
        "study",
        "tasks/arith.yaml",
        "--seeds",
        "0",
        "--arms",
        "population,no_evolution",
        "--out",
        str(out),
        "--samples",
        "2",
        *TINY,
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    records = [
        json.loads((out / f"{arm}-s0" / "final" / "summary.json").read_text())["pass_at_k"]
        for arm in ("population", "no_evolution")
    ]
    for record in records:
        assert record["samples"] == 2 and len(record["members"]) == 3  # two students and the base
        assert all(len(m["correct_counts"]) == record["limit"] == 3 for m in record["members"].values())
        assert {"pass@1"} <= set(record["members"]["base"]) and "pass@4" not in record["members"]["base"]
    assert records[0]["members"]["base"] == records[1]["members"]["base"]
    assert sum("__base__" in slots for slots in calls) == 1  # the base sampled once, copied into the other run
    again = runner.invoke(app, args)  # nothing new to sample
    assert again.exit_code == 0 and "sampled pass@k" not in again.output
    bad = runner.invoke(app, [*args[: -len(TINY)], "--samples", "-1", *TINY])
    assert bad.exit_code == 2 and "--samples" in bad.output
    assert "| population − no_evolution |" in (out / "report" / "tables.md").read_text()
    swapped = runner.invoke(app, [*args, "--reference", "no_evolution"])  # nothing runs: the tables again
    assert swapped.exit_code == 0, swapped.output
    assert "| no_evolution − population |" in (out / "report" / "tables.md").read_text()


def test_study_refuses_an_unknown_reference_arm_before_any_run(tmp_path):
    result = runner.invoke(
        app,
        [
            "study",
            "tasks/arith.yaml",
            "--out",
            str(tmp_path / "s"),
            "--arms",
            "population,no_evolution",
            "--reference",
            "size4",
            *TINY,
        ],
    )
    assert result.exit_code == 2 and "--reference size4" in result.output
    assert not list((tmp_path / "s").glob("*-s*"))
