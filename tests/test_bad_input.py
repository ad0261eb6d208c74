"""Bad input beyond tests/test_cli.py: each case exits non-zero within 5 s with
a message naming the problem and the fix, and leaves nothing that breaks a later resume.

Model-shape cases (rank above a module's dimension, unknown target modules, a corrupt
config.json) are caught from config.json before any weights load.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evolora.cli import app
from evolora.io import read_jsonl

runner = CliRunner()
TINY = [
    "--set",
    "model.name=tiny-random",
    "--set",
    "lora.rank=2",
    "--set",
    "selfplay.roles.teacher.max_new_tokens=4",
    "--set",
    "selfplay.roles.student.max_new_tokens=4",
    "--set",
    "eval.limit=0",
    "--set",
    "run.steps=1",
    "--set",
    "evolution.every=1",
]


@pytest.fixture(autouse=True, scope="module")
def _warm_imports():
    """Time the checks, not the first import of torch/peft (measured in a fresh process below)."""
    import evolora.evolution  # noqa: F401
    import evolora.tasks  # noqa: F401


def invoke(*args: str):
    began = time.perf_counter()
    result = runner.invoke(app, list(args))
    return result, " ".join(result.output.split()), time.perf_counter() - began


def assert_refused(result, output: str, seconds: float, *needles: str) -> None:
    assert result.exit_code not in (0, None), output
    assert result.exit_code == 2, f"exit {result.exit_code} (a traceback, not a message?): {output[-400:]}"
    assert seconds < 5, f"took {seconds:.1f} s"
    for needle in needles:
        assert needle in output, output
    assert "Traceback" not in output


@pytest.mark.parametrize(
    ("yaml_text", "needles"),
    [
        ("- run\n- model\n", ["must be a mapping of sections"]),  # a list, not a mapping
        ("lora: 5\n", ["lora", "valid dictionary"]),  # a section given as a scalar
        ("run:\n  steps: [1, 2]\n", ["run.steps", "valid integer"]),  # wrong type
        ("run:\n  steps: 3\n\tseed: 1\n", ["not valid YAML"]),  # a tab in the indentation
        (
            "runn:\n  steps: 3\n",
            ["runn: unknown key; did you mean 'run'? a config takes run, model, lora"],
        ),  # unknown section
        (
            "model: {name: tiny-random, dtyp: float32}\n",
            ["model.dtyp: unknown key; did you mean 'dtype'? model takes name, dtype"],
        ),
        ("population:\n  teachers: true\n", ["population.teachers", "got the boolean true"]),  # not 1
        ("lora:\n  alpha: false\n", ["lora.alpha", "got the boolean false"]),  # floats refuse bools too
        ("selfplay:\n  rewards: {correct: .nan}\n", ["selfplay.rewards.correct", "finite number"]),
    ],
    ids=[
        "list",
        "scalar-section",
        "wrong-type",
        "tab",
        "unknown-section",
        "unknown-nested",
        "bool-int",
        "bool-float",
        "nan-reward",
    ],
)
def test_malformed_config_files(tmp_path, yaml_text, needles):
    config = tmp_path / "bad.yaml"
    config.write_text(yaml_text)
    result, output, seconds = invoke("evolve", str(config), "--out", str(tmp_path / "run"))
    assert_refused(result, output, seconds, *needles)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "yaml_text",
    ["", "[]", "false", "0", "~", "# only a comment\n", "- run\n- model\n"],
    ids=["empty", "empty-list", "false", "zero", "null", "comment-only", "list"],
)
def test_config_whose_top_level_is_not_a_mapping(tmp_path, yaml_text):
    """Once read as the default config (a run on the real model), or a traceback with --set."""
    config = tmp_path / "bad.yaml"
    config.write_text(yaml_text)
    result, output, seconds = invoke("evolve", str(config), "--out", str(tmp_path / "run"), *TINY)
    assert_refused(result, output, seconds, "bad.yaml", "must be a mapping of sections (run, model, ...), got")
    assert len(result.output.strip().splitlines()) <= 3, result.output  # one message (wrapped at 80 columns)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "content", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", b"\x00\x01\x02binary"], ids=["not-utf8", "nul-bytes"]
)
def test_binary_config_file(tmp_path, content):
    config = tmp_path / "weights.yaml"
    config.write_bytes(content)
    result, output, seconds = invoke("evolve", str(config), "--out", str(tmp_path / "run"), *TINY)
    assert_refused(result, output, seconds, "weights.yaml", "is not a YAML text file")
    assert not (tmp_path / "run").exists()


def test_resume_whose_stored_config_is_a_list(tmp_path):
    (tmp_path / "config.yaml").write_text("- run\n")
    result, output, seconds = invoke("evolve", "--resume", str(tmp_path), "--set", "run.steps=2")
    assert_refused(result, output, seconds, "config.yaml", "must be a mapping of sections")


def test_bad_yaml_in_an_override_value(tmp_path):
    result, output, seconds = invoke(
        "evolve", "tasks/gsm.yaml", "--out", str(tmp_path / "run"), "--set", "run.steps=[1"
    )
    assert_refused(result, output, seconds, "--set run.steps=[1", "not valid YAML")


@pytest.mark.parametrize("name", ["arith", "code", "gsm"])
def test_shipped_configs_and_numeric_overrides_still_load(name):
    from evolora.config import load_config

    config = load_config(
        f"tasks/{name}.yaml",
        ["population.teachers=4", "lora.alpha=16", "run.steps=2.0", "model.num_threads=2", "eval.enabled=false"],
        seed=7,
    )
    assert (config.population.teachers, config.lora.alpha, config.run.steps) == (4, 16.0, 2)
    assert type(config.run.steps) is int and type(config.lora.alpha) is float
    assert (config.model.num_threads, config.eval.enabled, config.run.seed) == (2, False, 7)


@pytest.mark.parametrize(
    ("override", "needles"),
    [
        ("run.steps=-1", ["run.steps", "greater than or equal to 0"]),
        ("selfplay.samples_per_problem=-2", ["selfplay.samples_per_problem"]),
        ("selfplay.roles.teacher.max_new_tokens=0", ["selfplay.roles.teacher.max_new_tokens"]),
        ("eval.limit=-1", ["eval.limit"]),
        ("run.checkpoint_every=0", ["run.checkpoint_every"]),
        ("run.steps=1.5", ["run.steps", "fractional part"]),
        ("lora.rank=0", ["lora.rank"]),
        ("lora.rank=4096", ["lora.rank", "1024"]),
        ("lora.target_modules=[]", ["at least one target module"]),
        ("run.steps", ["--set expects KEY=VALUE"]),
        ("run=3", ["run"]),
        ("population.teachers=true", ["population.teachers", "boolean"]),
        ("model.num_threads=true", ["model.num_threads", "boolean"]),
        ("selfplay.top_p=true", ["selfplay.top_p", "boolean"]),
        ("selfplay.rewards.copied=.inf", ["selfplay.rewards.copied", "finite number"]),
    ],
)
def test_impossible_values_and_negative_budgets(tmp_path, override, needles):
    result, output, seconds = invoke("evolve", "tasks/gsm.yaml", "--out", str(tmp_path / "run"), "--set", override)
    assert_refused(result, output, seconds, *needles)
    assert not (tmp_path / "run" / "config.yaml").exists()


def test_eval_path_that_is_a_directory(tmp_path):
    result, output, seconds = invoke(
        "evolve", "tasks/gsm.yaml", "--out", str(tmp_path / "run"), "--set", f"task.params.eval_path={tmp_path}"
    )
    assert_refused(result, output, seconds, "eval_path", "is not a file", "--set task.params.eval_path")


def test_model_path_that_is_a_file(tmp_path):
    weights = tmp_path / "model.bin"
    weights.write_bytes(b"\0" * 16)
    result, output, seconds = invoke(
        "evolve", "tasks/gsm.yaml", "--out", str(tmp_path / "run"), "--set", f"model.name={weights}"
    )
    assert_refused(result, output, seconds, "is a file", "config.json")


@pytest.mark.parametrize("where", ["under-a-file", "proc"])
def test_unwritable_output_directory(tmp_path, where):
    if where == "under-a-file":
        (tmp_path / "afile").write_text("x")
        out = tmp_path / "afile" / "run"
    else:
        out = Path("/proc/evolora-run")  # not writable, even by root
    result, output, seconds = invoke("evolve", "tasks/gsm.yaml", "--out", str(out), *TINY)
    assert_refused(result, output, seconds, "cannot write to output directory", "--out")


def test_resume_of_a_folder_that_is_not_a_run(tmp_path):
    result, output, seconds = invoke("evolve", "--resume", str(tmp_path))
    assert_refused(result, output, seconds, "not a run directory", "--out directory of an earlier run")


def test_model_directory_with_a_corrupt_config(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{not json")
    result, output, seconds = invoke(
        "evolve", "tasks/gsm.yaml", "--out", str(tmp_path / "run"), "--set", f"model.name={model}"
    )
    assert_refused(result, output, seconds, "config.json")


def test_rank_above_a_module_dimension(tmp_path):
    result, output, seconds = invoke(
        "evolve", "tasks/gsm.yaml", "--out", str(tmp_path / "run"), *TINY, "--set", "lora.rank=1024"
    )
    assert_refused(result, output, seconds, "lora.rank", "64")


def test_target_module_missing_from_the_model(tmp_path):
    result, output, seconds = invoke(
        "evolve", "tasks/gsm.yaml", "--out", str(tmp_path / "run"), *TINY, "--set", "lora.target_modules=[nope_proj]"
    )
    assert_refused(result, output, seconds, "nope_proj", "lora.target_modules")


def test_role_too_small_for_crossover(tmp_path):
    result, output, seconds = invoke(
        "evolve",
        "tasks/gsm.yaml",
        "--out",
        str(tmp_path / "run"),
        *TINY,
        "--set",
        "population.teachers=1",
        "--set",
        "evolution.elitism=0",
        "--set",
        "evolution.crossover_rate=1.0",
    )
    assert_refused(result, output, seconds, "population.teachers", "crossover")


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_refused_resumes_leave_the_run_resumable(tmp_path):
    out = tmp_path / "run"
    result, output, _ = invoke("evolve", "tasks/gsm.yaml", "--out", str(out), *TINY)
    assert result.exit_code == 0, output
    before = _digest(out)
    for bad in (
        ["--set", "lora.rnak=2"],
        ["--set", "run.steps=-3"],
        ["--set", "run.steps"],
        ["--set", "evolution.mutation.name=gausian"],
    ):
        result, output, seconds = invoke("evolve", "--resume", str(out), *bad)
        assert_refused(result, output, seconds)
        assert _digest(out) == before, f"a refused resume ({bad}) changed the run directory"
    # a fresh run into the same directory is refused too, without touching it
    result, output, seconds = invoke("evolve", "tasks/gsm.yaml", "--out", str(out), *TINY)
    assert_refused(result, output, seconds, "--resume")
    assert _digest(out) == before
    result, output, _ = invoke("evolve", "--resume", str(out), "--set", "run.steps=2")
    assert result.exit_code == 0, output
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]


def test_refusing_a_config_does_not_load_the_ml_stack(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom evolora.cli import app\n"
        f"r = CliRunner().invoke(app, ['evolve', 'tasks/gsm.yaml', '--out', {str(tmp_path / 'run')!r}, "
        "'--set', 'evolution.mutation.name=gausian'])\n"
        "assert r.exit_code == 2, r.output\n"
        "print(sorted(m for m in ('peft', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
