"""The command line's finish: presets (``evolora evolve arith`` from any folder, ``evolora init``),
``--version``, the command order, bare operator names, short whole-config errors and a quiet GGUF
conversion."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evolora.cli import app
from evolora.config import ConfigError, load_config
from evolora.config.presets import preset_dir, preset_names, preset_path
from evolora.io import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
TINY = [
    "--set",
    "model.name=tiny-random",
    "--set",
    "lora.rank=2",
    "--set",
    "selfplay.roles.teacher.max_new_tokens=8",
    "--set",
    "selfplay.roles.student.max_new_tokens=8",
    "--set",
    "eval.limit=0",
    "--set",
    "run.steps=1",
    "--set",
    "evolution.every=1",
]


def test_the_presets_are_the_tasks_folder_itself():
    assert preset_dir().resolve() == (ROOT / "tasks").resolve()  # a checkout reads tasks/ in place
    assert set(preset_names()) == {path.stem for path in (ROOT / "tasks").glob("*.yaml")} >= {"arith", "gsm", "code"}
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"]["evolora.presets"] == "tasks"  # the wheel ships the same files
    assert "evolora.presets" in setuptools["packages"] and setuptools["package-data"]["evolora.presets"] == ["*.yaml"]


def test_load_config_takes_a_preset_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_config("arith") == load_config("arith.yaml") == load_config(ROOT / "tasks" / "arith.yaml")
    assert load_config("gsm").task.name == "gsm"
    (tmp_path / "arith.yaml").write_text("run: {steps: 3}\ntask: {name: arith}\n")
    assert load_config("arith.yaml").run.steps == 3  # an existing file wins over the preset
    with pytest.raises(ConfigError, match="arith, arith_critic"):
        load_config("nope")
    with pytest.raises(ConfigError, match="no preset named"):
        preset_path("../tasks/gsm")


def test_evolve_a_preset_from_an_empty_folder_with_a_bare_operator_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["evolve", "arith", *TINY, "--set", "evolution.selection=truncation"])
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "runs").iterdir()
    assert run.name.startswith("arith-") and [r["step"] for r in read_jsonl(run / "metrics.jsonl")] == [1]
    assert "name: truncation" in (run / "config.yaml").read_text()


def test_init_writes_an_editable_copy_and_never_overwrites(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["init", "gsm"])
    assert result.exit_code == 0 and "evolora evolve gsm.yaml" in result.output
    assert (tmp_path / "gsm.yaml").read_bytes() == (ROOT / "tasks" / "gsm.yaml").read_bytes()
    (tmp_path / "gsm.yaml").write_text("edited")
    result = runner.invoke(app, ["init", "gsm"])
    assert result.exit_code == 2 and "already exists" in result.output
    assert (tmp_path / "gsm.yaml").read_text() == "edited"
    (tmp_path / "mine").mkdir()
    assert runner.invoke(app, ["init", "arith.yaml", "mine"]).exit_code == 0
    assert (tmp_path / "mine" / "arith.yaml").is_file()
    result = runner.invoke(app, ["init", "chess"])
    assert result.exit_code == 2 and "no preset named 'chess'" in result.output


def test_version_and_evolve_listed_first():
    from evolora import __version__

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"evolora {__version__}"
    from importlib.metadata import version

    assert version("evolora") == __version__  # pyproject reads it from evolora.__version__
    commands = [
        line.split()[1]
        for line in runner.invoke(app, ["--help"]).output.splitlines()
        if line.startswith("│ ") and len(line.split()) > 2 and line.split()[1].isalpha()
    ]
    assert commands[0] == "evolve" and {"init", "operators", "study", "report"} <= set(commands), commands


@pytest.mark.parametrize(
    "kind, name", [("selection", "truncation"), ("crossover", "slerp"), ("mutation", "lowrank_gaussian")]
)
def test_a_bare_operator_name_means_its_defaults(kind, name):
    config = load_config("arith", [f"evolution.{kind}={name}"])
    assert getattr(config.evolution, kind).name == name and getattr(config.evolution, kind).params == {}


def test_a_section_given_by_its_bare_name_takes_later_parts():
    config = load_config(
        "arith",
        [
            "evolution.selection=lexicase",
            "evolution.selection.params.epsilon=0.2",
            "evolution.fitness=exam",
            "evolution.fitness.problems=32",
        ],
    )
    assert (config.evolution.selection.name, config.evolution.selection.params) == ("lexicase", {"epsilon": 0.2})
    assert (config.evolution.fitness.name, config.evolution.fitness.problems) == ("exam", 32)
    with pytest.raises(ConfigError, match="parameter 'epsilon': -1 is out of range"):
        load_config("arith", ["evolution.selection=lexicase", "evolution.selection.params.epsilon=-1"])


def test_a_whole_config_error_names_its_keys_without_echoing_the_config():
    with pytest.raises(ConfigError) as error:
        load_config("arith", ["selfplay.mode=single_agent", "selfplay.matchmaking.hall_of_fame=2"])
    text = str(error.value)
    assert "selfplay.matchmaking.hall_of_fame" in text and "selfplay.mode" in text
    assert "{'run'" not in text and "got {" not in text and len(text.splitlines()) == 2


def test_the_gguf_conversion_prints_one_line_unless_verbose(tmp_path, monkeypatch, capfd):
    """transformers' per-tensor bar is dropped on a quiet command line; the line says what and how long."""
    import transformers
    from tqdm import tqdm

    from evolora.model import gguf
    from evolora.quiet import QUIET_ENV

    class Saved:
        config = type("Config", (), {})()

        def save_pretrained(self, directory):
            (Path(directory) / "config.json").write_text("{}")
            (Path(directory) / "model.safetensors").write_text("")

    def load(*args, **kwargs):
        for _ in tqdm(range(3), desc="Converting and de-quantizing GGUF tensors...", file=sys.stderr):
            pass
        return Saved()

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", load)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: Saved())
    source = tmp_path / "SmolLM2-135M-Instruct.Q8_0.gguf"
    for verbose in (False, True):
        monkeypatch.setenv(QUIET_ENV, "0" if verbose else "1")
        gguf.convert_gguf(source, tmp_path / f"out-{verbose}")
        err = capfd.readouterr().err
        assert gguf.is_converted(tmp_path / f"out-{verbose}")
        assert ("de-quantizing" in err) is verbose
        if not verbose:
            (line,) = err.strip().splitlines()
            assert line.startswith("converting SmolLM2-135M-Instruct GGUF to safetensors in") and " done in " in line


def test_the_lazy_public_api_is_visible_to_type_checkers():
    """``evolora/__init__.py`` imports every lazy name under TYPE_CHECKING, from the module __getattr__ uses."""
    import ast

    import evolora

    tree = ast.parse((ROOT / "evolora" / "__init__.py").read_text())
    guarded = next(
        node for node in tree.body if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
    )
    seen = {alias.name: node.module for node in guarded.body for alias in node.names}
    assert seen == evolora._EXPORTS


def test_run_bank_is_annotated_with_what_the_run_uses():
    import typing

    from evolora.bank import LocalBank, RemoteBank, RunBank
    from evolora.run import Run

    assert typing.get_type_hints(Run, {**vars(__import__("evolora.bank", fromlist=["x"]))})["bank"] == RunBank
    assert {"slots", "model"} <= set(typing.get_type_hints(LocalBank)) and "tokenizer" in typing.get_type_hints(
        RemoteBank
    )
    assert callable(getattr(RemoteBank, "reconnect", None))
