"""A user's own engine, named in YAML as ``generation.engine: package.module:Class`` (or registered
under a short name), is built once per bank with its model, tokenizer and bank, and runs a step."""

from __future__ import annotations

import textwrap

import pytest
import yaml
from run_helpers import TINY_OVERRIDES
from typer.testing import CliRunner

import evolora.generation.registry as registry
from evolora.config import ConfigError, load_config
from evolora.generation.engine import EagerEngine

MODULE = "user_engines_for_tests"

SOURCE = textwrap.dedent('''
    from evolora.generation.engine import EagerEngine
    from evolora.generation.registry import register_engine

    BUILT = []


    @register_engine("counting_for_tests")
    class CountingEngine(EagerEngine):
        """Counts the rows it generates and the slots it is told were written."""

        name = "counting"

        def __init__(self, model, tokenizer, bank):
            super().__init__(model, tokenizer, bank)
            self.rows, self.refreshed = 0, []
            BUILT.append(self)

        def generate(self, prompts, adapters, sampling, **options):
            self.rows += len(prompts)
            return super().generate(prompts, adapters, sampling, **options)

        def refresh(self, slots):
            self.refreshed += list(slots)
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """The module on the import path; the registry as it was afterwards."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, MODULE, raising=False)
    saved = dict(registry.ENGINES)
    yield tmp_path
    registry.ENGINES.clear()
    registry.ENGINES.update(saved)


def _yaml(tmp_path, engine: str):
    data = {**TINY_OVERRIDES, "task": {"name": "toy"}, "run": {"steps": 1, "seed": 0}, "generation": {"engine": engine}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("named", [f"{MODULE}:CountingEngine", "counting_for_tests"])
def test_a_users_engine_named_in_yaml_runs_a_tiny_step(user_module, tmp_path, named, single_thread):
    from evolora.run import Run
    from evolora.tasks.toy import ToyTask

    if ":" not in named:  # a short name is registered when its module is imported
        __import__(MODULE)
    config = load_config(_yaml(tmp_path, named))
    assert config.generation.engine == named
    run = Run(config, tmp_path / "run", task=ToyTask())
    engine = run.bank.engine
    assert type(engine).__name__ == "CountingEngine" and isinstance(engine, EagerEngine)
    assert engine.tokenizer is run.tokenizer and engine.model is run.bank.model and engine.bank is run.bank
    assert len(__import__(MODULE).BUILT) == 1  # built once, with the bank
    run.run_step()
    teachers = config.role_sizes["teacher"]
    assert engine.rows >= teachers * config.selfplay.proposals_per_teacher  # the teachers' rows at least
    assert set(engine.refreshed) >= {m.slot for m in run.population.members if m.role == "student"}  # updated


def test_an_engine_that_does_not_import_is_refused_when_the_config_loads(user_module, tmp_path):
    with pytest.raises(ConfigError, match="generation.engine.*cannot import module 'no_such_pkg.engines'"):
        load_config(_yaml(tmp_path, "no_such_pkg.engines:Mine"))
    with pytest.raises(ConfigError, match=f"module '{MODULE}' has no attribute 'Missing'"):
        load_config(_yaml(tmp_path, f"{MODULE}:Missing"))
    with pytest.raises(ConfigError, match="unknown generation.engine 'vllm'; use auto, one of"):
        load_config(_yaml(tmp_path, "vllm"))


def test_evolora_engines_lists_the_shipped_and_a_users_engines(user_module, monkeypatch):
    from evolora.cli import app

    monkeypatch.chdir(user_module)
    out = CliRunner().invoke(app, ["engines", "--import", MODULE])
    assert out.exit_code == 0, out.output
    for name in ("auto", "eager", "graph", "peft", "counting_for_tests"):
        assert f"│ {name}" in out.output
    assert "CUDA; llama" in out.output


def test_a_registered_name_is_taken_once():
    with pytest.raises(ValueError, match="already registered"):
        registry.register_engine("eager", "x:Y")
    with pytest.raises(ValueError, match="not 'auto'"):
        registry.register_engine("auto", "x:Y")
