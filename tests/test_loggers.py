"""Experiment trackers (run.loggers): TensorBoard and W&B curves equal metrics.jsonl, a resume
shows every step once, and a missing optional package exits 2 before any model loads."""

from __future__ import annotations

import glob
import json
import shutil
import struct
import typing
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("tensorboard", reason="the dev extra installs tensorboard: pip install -e '.[dev]'")
pytest.importorskip("wandb", reason="the dev extra installs wandb: pip install -e '.[dev]'")

from evolora.cli import app  # noqa: E402
from evolora.config import ConfigError, RunConfig, config_from_dict  # noqa: E402
from evolora.config.run import OPTIONAL_PACKAGES  # noqa: E402
from evolora.io import read_jsonl  # noqa: E402
from evolora.loggers import LOGGERS, births_markdown, scalars  # noqa: E402

runner = CliRunner()
TOY = [
    "--set",
    "model.name=tiny-random",
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
    "selfplay.roles.teacher.max_new_tokens=8",
    "--set",
    "selfplay.roles.student.max_new_tokens=6",
    "--set",
    "evolution.every=1",
    "--set",
    "eval.limit=2",
    "--set",
    "eval.max_new_tokens=4",
    "--set",
    "run.checkpoint_every=1",
]
LOGGED = "run.loggers=[jsonl,tensorboard,wandb]"


@pytest.fixture(autouse=True)
def _offline_wandb(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


def evolve(*args: str):
    result = runner.invoke(app, ["evolve", "tasks/gsm.yaml", *args])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory, single_thread):
    """A finished 2-step toy run with every logger on."""
    out = tmp_path_factory.mktemp("loggers") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")
        evolve("--out", str(out), *TOY, "--set", "run.steps=2", "--set", LOGGED)
    return out


def tensorboard_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def wandb_records(run_dir: Path) -> list:
    """Every record of the run's offline .wandb files (W&B's LevelDB-style log: a 7-byte file
    header, 32 KiB blocks, records split into FULL/FIRST/MIDDLE/LAST chunks with 7-byte headers)."""
    from wandb.proto import wandb_internal_pb2

    found = []
    for path in sorted(glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))):
        data, pos, block, chunk = Path(path).read_bytes(), 7, 32768, b""
        assert data[:4] == b":W&B"
        while pos + 7 <= len(data):
            _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
            if block - pos % block < 7 or (kind == 0 and length == 0):
                pos += block - pos % block
                continue
            chunk, pos = chunk + data[pos + 7 : pos + 7 + length], pos + 7 + length
            if kind in (1, 4):  # FULL or LAST
                record = wandb_internal_pb2.Record()
                record.ParseFromString(chunk)
                found.append(record)
                chunk = b""
    return found


def wandb_history(run_dir: Path) -> list[dict]:
    rows = []
    for record in wandb_records(run_dir):
        if record.WhichOneof("record_type") == "history":
            rows.append({(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in record.history.item})
    return rows


RECORD = {
    "step": 3,
    "reward": {"teacher": -0.25, "student": None},
    "validity_rate": 0.5,
    "solve_rate": None,
    "format_error_rate": 0.0,
    "ratings": {"s1": {"role": "student", "mu": 27.0, "sigma": 6.0, "elo": 1010.0}},
    "loss": {"s1": 0.125},
    "entropy": {"s1": 2.5},
    "mean_entropy": 2.5,
    "complexity": {"count": 2, "mean": 7.5},
    "coverage": 4,
    "tokens": 100,
    "tokens_per_second": float("nan"),
    "seconds": {"train": 0.5, "total": 2.0},
    "peak_rss_mb": 512.0,
    "births": [
        {
            "step": 3,
            "role": "student",
            "replaced": "s0",
            "child": "s2",
            "parents": ["s1", "s3"],
            "operator": "svd_merge",
        }
    ],
}


def test_scalars_flatten_a_record_leaving_out_missing_values():
    assert scalars(RECORD) == {
        "reward/teacher": -0.25,
        "rate/validity": 0.5,
        "rate/format_error": 0.0,
        "rating_mu/s1": 27.0,
        "rating_conservative/s1": 9.0,
        "elo/s1": 1010.0,
        "loss/s1": 0.125,
        "entropy/s1": 2.5,
        "entropy/mean": 2.5,
        "complexity/count": 2.0,
        "complexity/mean": 7.5,
        "coverage": 4.0,
        "throughput/tokens": 100.0,
        "seconds/train": 0.5,
        "seconds/total": 2.0,
        "births": 1.0,
        "memory/peak_rss_mb": 512.0,
    }
    assert births_markdown(RECORD["births"]).splitlines()[2] == "| s2 | s0 | student | svd_merge | s1, s3 |"
    assert births_markdown([]) is None


def test_config_key_names_match_the_registry_and_keep_jsonl():
    names = typing.get_args(typing.get_args(RunConfig.model_fields["loggers"].annotation)[0])
    assert set(names) == set(LOGGERS) and set(OPTIONAL_PACKAGES) <= set(LOGGERS)
    assert config_from_dict({}).run.loggers == ("jsonl",)
    for bad, message in ((["tensorboard"], "keep jsonl"), (["jsonl", "jsonl"], "once"), (["jsonl", "mlflow"], "wandb")):
        with pytest.raises(ConfigError, match=message):
            config_from_dict({"run": {"loggers": bad}})


@pytest.mark.slow
def test_tensorboard_curves_equal_metrics_jsonl(logged_run):
    metrics = read_jsonl(logged_run / "metrics.jsonl")
    curves = tensorboard_scalars(logged_run)
    assert [r["step"] for r in metrics] == [1, 2]
    for tag in ("reward/teacher", "rate/validity", "rate/solve", "seconds/total", "throughput/tokens", "coverage"):
        assert [step for step, _ in curves[tag]] == [1, 2], tag
    for record in metrics:
        at = {tag: dict(points).get(record["step"]) for tag, points in curves.items()}
        assert at["reward/teacher"] == pytest.approx(record["reward"]["teacher"], rel=1e-6)
        assert at["rate/validity"] == pytest.approx(record["validity_rate"]) == 1.0  # toy: every proposal is valid
        assert at["rate/solve"] == pytest.approx(record["solve_rate"], rel=1e-6)
        assert at["seconds/total"] == pytest.approx(record["seconds"]["total"], rel=1e-6)
        assert at["throughput/tokens"] == record["tokens"]
        for member, rating in record["ratings"].items():
            assert at[f"rating_mu/{member}"] == pytest.approx(rating["mu"], rel=1e-6)
            assert at[f"rating_conservative/{member}"] == pytest.approx(rating["mu"] - 3 * rating["sigma"], rel=1e-5)
        for member, loss in record["loss"].items():
            assert at[f"loss/{member}"] == pytest.approx(loss, rel=1e-5, abs=1e-7)
        assert at["births"] == len(record["births"])
    summary = json.loads((logged_run / "final" / "summary.json").read_text())
    assert curves["held_out/base"] == [(2, pytest.approx(summary["held_out"]["base"]["accuracy"]))]


def test_births_are_logged_as_text(logged_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logged_run / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    texts = {e.step: e.tensor_proto.string_val[0].decode() for e in events.Tensors("births/text_summary")}
    births = {r["step"]: r["births"] for r in read_jsonl(logged_run / "metrics.jsonl") if r["births"]}
    assert set(texts) == set(births) == {1}  # evolution.at_last_step is off: births at step 1 only
    for birth in births[1]:
        assert f"| {birth['child']} | {birth['replaced']} | {birth['role']} |" in texts[1]


def test_wandb_offline_run_holds_the_curves_and_the_config(logged_run):
    metrics = read_jsonl(logged_run / "metrics.jsonl")
    history = wandb_history(logged_run)
    by_step = {row["_step"]: row for row in history}
    assert sorted(by_step) == [1, 2]
    for record in metrics:
        row = by_step[record["step"]]
        assert row["reward/teacher"] == pytest.approx(record["reward"]["teacher"])
        assert row["seconds/total"] == pytest.approx(record["seconds"]["total"])
        assert row["rate/solve"] == pytest.approx(record["solve_rate"])
    runs = [r.run for r in wandb_records(logged_run) if r.WhichOneof("record_type") == "run"]
    assert {r.run_id for r in runs} == {(logged_run / "wandb" / "run_id").read_text().strip()}
    config = {u.key: json.loads(u.value_json) for u in runs[0].config.update}
    assert config["model"]["name"] == "tiny-random" and config["run"]["loggers"] == ["jsonl", "tensorboard", "wandb"]


def test_resume_after_a_lost_checkpoint_shows_every_step_once(logged_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(logged_run, out)
    shutil.rmtree(out / "final")
    shutil.rmtree(out / "checkpoints" / "step_000002")  # the crash lost step 2's checkpoint, not its logs
    old = dict(tensorboard_scalars(out)["seconds/total"])
    evolve("--resume", str(out), "--set", "run.steps=3")
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in metrics] == [1, 2, 3]
    curves = tensorboard_scalars(out)
    assert len(list((out / "tensorboard").glob("events.out.tfevents.*"))) == 2
    for tag in ("seconds/total", "reward/teacher", "rate/validity"):
        assert [step for step, _ in curves[tag]] == [1, 2, 3], tag  # step 2 once: the old event is purged
    total = dict(curves["seconds/total"])
    assert total[1] == pytest.approx(old[1])
    for record in metrics:  # step 2 shows the resumed run's value (its wall clock differs from the first)
        assert total[record["step"]] == pytest.approx(record["seconds"]["total"], rel=1e-6)
    assert total[2] != pytest.approx(old[2], rel=1e-9, abs=0)
    runs = {r.run.run_id for r in wandb_records(out) if r.WhichOneof("record_type") == "run"}
    assert len(runs) == 1 and len(glob.glob(str(out / "wandb" / "offline-run-*"))) == 2  # one W&B run, resumed
    assert max(row["_step"] for row in wandb_history(out)) == 3


@pytest.mark.parametrize("logger", sorted(OPTIONAL_PACKAGES))
def test_missing_package_exits_2_with_the_pip_command_before_a_model_loads(logger, tmp_path, monkeypatch):
    import importlib.util

    import evolora.model

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a, **k: None if name == OPTIONAL_PACKAGES[logger] else real(name, *a, **k),
    )
    monkeypatch.setattr(evolora.model, "load_base", lambda *a, **k: pytest.fail("a model was loaded"))
    out = tmp_path / "run"
    result = runner.invoke(
        app, ["evolve", "tasks/gsm.yaml", "--out", str(out), *TOY, "--set", f"run.loggers=[jsonl,{logger}]"]
    )
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert "run.loggers" in output and f"pip install 'evolora[{logger}]'" in output
    assert not (out / "config.yaml").exists()


def test_a_tracker_that_fails_to_start_exits_2_naming_it(tmp_path, monkeypatch, single_thread):
    import evolora.loggers

    closed = []

    class Broken:
        def __init__(self, run_dir, start_step):
            raise RuntimeError("no login")

    class Probe(evolora.loggers.LOGGERS["jsonl"]):
        def close(self, summary=None):
            closed.append(summary)

    monkeypatch.setitem(evolora.loggers.LOGGERS, "jsonl", Probe)
    monkeypatch.setitem(evolora.loggers.LOGGERS, "tensorboard", Broken)
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        [
            "evolve",
            "tasks/gsm.yaml",
            "--out",
            str(out),
            *TOY,
            "--set",
            "run.steps=1",
            "--set",
            "run.loggers=[jsonl,tensorboard]",
        ],
    )
    output = " ".join(result.output.split())
    assert result.exit_code == 2, output
    assert "cannot start the tensorboard logger (RuntimeError: no login)" in output
    assert closed == [None] and not (out / "metrics.jsonl").exists()  # the jsonl logger opened first is closed
