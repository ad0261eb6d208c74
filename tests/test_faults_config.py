"""Fault class "config": hostile or careless YAML and ``--set`` values (alias bombs, huge numbers,
huge strings, duplicate keys, control characters, deep nesting) are refused by
:mod:`evolora.config.strict_yaml` before anything is built: exit 2, at most 3 lines and 500
bytes, no traceback, within a second of CPU time, and nothing is written. The malformed-but-small cases
live in tests/test_bad_input.py.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import yaml
from typer.testing import CliRunner

from evolora.cli import app
from evolora.config import ConfigError, load_config, parse_override
from evolora.config.strict_yaml import MAX_NODES, StrictYAMLError, load_yaml

runner = CliRunner()


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """Nine levels of nine aliases: 9**9 (387 million) leaves once expanded."""
    names = [f"l{i}" for i in range(levels)]
    lines = [f"{names[0]}: &{names[0]} [{', '.join(['lol'] * width)}]"]
    for previous, name in zip(names, names[1:]):
        lines.append(f"{name}: &{name} [{', '.join([f'*{previous}'] * width)}]")
    return "\n".join(lines) + "\n"


HOSTILE_FILES = {
    "alias-bomb": (alias_bomb(), ["values, aliases expanded"]),
    "recursive-alias": ("run: &a [*a]\n", ["alias refers to a value that contains it"]),
    "huge-int": ("run:\n  steps: " + "9" * 5000 + "\n", ["integer", "5000 characters", "at most 40"]),
    "huge-float": ("lora:\n  alpha: 1." + "5" * 300 + "\n", ["number", "302 characters"]),
    "huge-string": ("model:\n  name: " + "x" * 130_000 + "\n", ["the string", "130,000 characters"]),
    "huge-key": ("x" * 10_000 + ": 1\n", ["not valid YAML"]),
    "duplicate-flow": ("lora: {rank: 8, alpha: 16, rank: 4}\n", ["key 'rank' appears twice", "columns 8 and 28"]),
    "duplicate-block": ("run:\n  steps: 3\n  seed: 1\n  steps: 5\n", ["key 'steps' appears twice", "lines 2 and 4"]),
    "duplicate-section": (
        "run: {steps: 1}\nmodel: {name: tiny-random}\nrun: {steps: 2}\n",
        ["key 'run'", "lines 1 and 3"],
    ),
    "nul-escape": ('model:\n  name: "tiny\\0random"\n', ["control character U+0000"]),
    "bell-escape": ('task:\n  params: {eval_path: "a\\x07b"}\n', ["control character U+0007"]),
    "deep-nesting": ("a: " + "[" * 50_000 + "]" * 50_000 + "\n", ["nest more than"]),
    "many-values": (
        "lora:\n  target_modules: [" + ", ".join(["q_proj"] * (MAX_NODES + 10)) + "]\n",
        [f"more than {MAX_NODES:,} values"],
    ),
    "huge-file": ("# padding\n" * 120_000, ["characters (at most 1,048,576)"]),
    "long-yaml-error": ("run:\n  steps: [" + "z" * 100_000 + "\n", ["not valid YAML", "line 3"]),
}


def assert_short_refusal(result, needles, seconds):
    output = result.output
    assert result.exit_code == 2, output[-500:]
    assert "Traceback" not in output
    assert len(output.strip().splitlines()) <= 3, output[:600]
    assert len(output.encode()) <= 500, output[:600]
    assert seconds < 1.0, f"took {seconds:.2f} s of CPU"
    flat = " ".join(output.split())
    for needle in needles:
        assert needle in flat, flat


@pytest.fixture(autouse=True, scope="module")
def _warm_imports():
    """Time the parsing, not the first import of the CLI's modules."""
    runner.invoke(app, ["evolve", "--help"])


@pytest.mark.parametrize("name", list(HOSTILE_FILES))
def test_hostile_config_file_is_refused_in_one_short_message(tmp_path, name):
    text, needles = HOSTILE_FILES[name]
    config = tmp_path / "hostile.yaml"
    config.write_text(text)
    began = time.process_time()  # CPU time: a shared, loaded host stretches the wall clock
    result = runner.invoke(app, ["evolve", str(config), "--out", str(tmp_path / "run")])
    assert_short_refusal(result, needles, time.process_time() - began)
    assert not (tmp_path / "run").exists()


HOSTILE_SETS = {
    "huge-int": ("run.steps=" + "9" * 5000, ["integer", "5000 characters"]),
    "huge-string": ("model.name=" + "x" * 130_000, ["the string", "130,000 characters"]),
    "huge-key": ("k" * 5000 + "=1", ["the key", "5,000 characters"]),
    "control-char": ("model.name=tiny\x01random", ["control character U+0001"]),
    "nul-escape": ('model.name="tiny\\0random"', ["control character U+0000"]),
    "duplicate-key": ("lora={rank: 8, rank: 4}", ["key 'rank' appears twice"]),
    "bad-yaml-long": ("run.steps=[" + "z" * 100_000, ["not valid YAML"]),
    "alias-bomb": (
        "task.params=" + "{" + alias_bomb(6, 9).replace("\n", ", ").rstrip(", ") + "}",
        ["values, aliases expanded"],
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE_SETS))
def test_hostile_set_value_is_refused_in_one_short_message(tmp_path, name):
    override, needles = HOSTILE_SETS[name]
    began = time.process_time()
    result = runner.invoke(app, ["evolve", "tasks/gsm.yaml", "--out", str(tmp_path / "run"), "--set", override])
    assert_short_refusal(result, needles, time.process_time() - began)
    assert not (tmp_path / "run").exists()


def test_alias_bomb_in_a_fresh_process_is_fast_and_small(tmp_path):
    """The measured failure: 13.5 s and 3.2 GiB before the bounded loader; now refused before expansion."""
    config = tmp_path / "bomb.yaml"
    config.write_text(alias_bomb())
    # VmHWM, not ru_maxrss: Linux carries the forking parent's peak into a child's ru_maxrss across exec
    script = (
        "import sys; from evolora.config import load_config, ConfigError\n"
        f"try: load_config({str(config)!r})\n"
        "except ConfigError as e: print('refused', e)\n"
        "hwm = [line for line in open('/proc/self/status') if line.startswith('VmHWM')][0]\n"
        "print('rss_mb', int(hwm.split()[1]) // 1024)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert "refused" in done.stdout, done.stdout + done.stderr[-500:]
    assert int(done.stdout.split("rss_mb")[1]) < 500, done.stdout


def test_plain_anchors_merges_and_numbers_still_load():
    text = (
        "defaults: &d {rank: 4, alpha: 8}\nlora:\n  <<: *d\n  rank: 2\nsteps: 1_000\nlr: 5.0e-5\n"
        'names: [a, b]\nmulti: "line one\\nline two\\tend"\n'
    )
    data = load_yaml(text)
    assert data["lora"] == {"rank": 2, "alpha": 8}  # an explicit key overrides a merged one (YAML's rule)
    assert data["steps"] == 1000 and data["lr"] == 5e-5
    assert data["multi"] == "line one\nline two\tend"


def test_the_library_raises_config_error_not_yaml_errors(tmp_path):
    (tmp_path / "dup.yaml").write_text("run: {steps: 1, steps: 2}\n")
    with pytest.raises(ConfigError, match="appears twice"):
        load_config(tmp_path / "dup.yaml")
    with pytest.raises(ConfigError, match="control character"):
        parse_override("model.name=a\x00b")
    with pytest.raises(StrictYAMLError):
        load_yaml("a: 1\na: 2\n")
    assert not isinstance(StrictYAMLError("x"), yaml.YAMLError)


def test_long_values_in_validation_messages_are_shortened(tmp_path):
    """A wrong-typed value of 4,000 characters is quoted in at most 80."""
    result = runner.invoke(
        app, ["evolve", "tasks/gsm.yaml", "--out", str(tmp_path / "run"), "--set", "run.steps=" + "y" * 4000]
    )
    assert result.exit_code == 2
    assert "y" * 81 not in result.output and len(result.output.encode()) <= 500, result.output[:600]
