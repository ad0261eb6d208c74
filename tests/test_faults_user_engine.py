"""Fault class "user code", engines: a user's own engine (``generation.engine: package.module:Class``)
that raises while it is built or in ``generate``/``logprobs``/``refresh``, or returns what breaks its
contract (not one Completion per prompt by its adapter, log-probs of a wrong shape or with NaN), is
reported in at most 3 lines naming ``generation.engine``, the engine and its contract (exit 2);
``--verbose`` adds the traceback; the run resumes once it is fixed. evolora's engines are not wrapped,
and a guarded engine keeps its class (its name in cache keys)."""

from __future__ import annotations

import sys
import textwrap

import pytest
from run_helpers import TOY_ARGS
from typer.testing import CliRunner

from evolora.cli import app
from evolora.generation.engine import EagerEngine
from evolora.generation.registry import ENGINES, engine_spec
from evolora.generation.types import Sampling
from evolora.generation.user_engine import CONTRACT
from evolora.io import read_jsonl
from evolora.user_code import UserCodeError

MODULE = "faulty_user_engines"
SOURCE = textwrap.dedent("""
    import torch

    from evolora.generation.engine import EagerEngine

    MODE = {"flaky": "raise"}


    class Raising(EagerEngine):
        def __init__(self, model, tokenizer, bank):
            raise KeyError("cuda:7")


    class DropsARow(EagerEngine):
        def generate(self, prompts, adapters, sampling, **options):
            return super().generate(prompts, adapters, sampling, **options)[:-1]


    class NanLogprobs(EagerEngine):
        def logprobs(self, names, samples):
            return super().logprobs(names, samples) * float("nan")


    class Flaky(EagerEngine):
        def generate(self, prompts, adapters, sampling, **options):
            if MODE["flaky"] == "raise":
                raise RuntimeError("not fixed yet")
            return super().generate(prompts, adapters, sampling, **options)
""")
runner = CliRunner()


@pytest.fixture
def user_engines(tmp_path, monkeypatch):
    """``faulty_user_engines``, importable from the current folder as a user's module is."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    _forget()
    yield
    _forget()  # none left in the registry for other tests


def _forget() -> None:
    sys.modules.pop(MODULE, None)
    for name in [n for n in ENGINES if n.startswith(f"{MODULE}:")]:
        ENGINES.pop(name)


@pytest.fixture
def bank_parts(single_thread):
    from evolora.bank.local import AdapterBank
    from evolora.model import load_base

    model, tokenizer = load_base("tiny-random")
    bank = AdapterBank(model, ["A", "B"], rank=2, alpha=4, target_modules=("q_proj", "v_proj"), tokenizer=tokenizer)
    return bank, tokenizer


def build(name: str, bank_parts):
    bank, tokenizer = bank_parts
    return engine_spec(f"{MODULE}:{name}").load()(bank.model, tokenizer, bank)


def test_an_engine_that_raises_while_built_is_named(user_engines, bank_parts):
    with pytest.raises(UserCodeError) as caught:
        build("Raising", bank_parts)
    assert str(caught.value) == (
        f"generation.engine '{MODULE}:Raising' raised KeyError: 'cuda:7' while it was built; the contract: {CONTRACT}"
    )


def test_an_engine_breaking_its_contract_is_named_and_keeps_its_class(user_engines, bank_parts):
    bank, tokenizer = bank_parts
    engine = build("DropsARow", bank_parts)
    assert type(engine).__name__ == "DropsARow" and isinstance(engine, EagerEngine)
    prompts = [tokenizer("1+1=")["input_ids"]] * 2
    with pytest.raises(
        UserCodeError,
        match=rf"generation.engine '{MODULE}:DropsARow' generate returned 1 "
        r"completions for 2 prompts; the contract: cls\(model",
    ):
        engine.generate(prompts, ["A", "B"], Sampling(max_new_tokens=2, greedy=True))
    engine = build("NanLogprobs", bank_parts)
    samples = EagerEngine(bank.model, tokenizer, bank).generate(
        prompts, ["A", "B"], Sampling(max_new_tokens=2, greedy=True)
    )
    with pytest.raises(UserCodeError, match="logprobs returned NaN log-probs"):
        engine.logprobs(["A", "B"], samples)


def test_evolora_engines_are_not_wrapped():
    assert engine_spec("eager").load() is EagerEngine


def run_args(out, engine: str) -> list[str]:
    return ["evolve", "tasks/gsm.yaml", "--out", str(out), *TOY_ARGS, "--set", f"generation.engine={engine}"]


def error_lines(output: str) -> list[str]:
    lines = output.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("error:"))
    return lines[start:]


@pytest.mark.parametrize(
    "name, problem", [("Raising", "raised KeyError: 'cuda:7' while it was built"), ("DropsARow", "generate returned")]
)
def test_the_cli_names_a_failing_engine_in_at_most_3_lines_and_verbose_adds_the_traceback(
    user_engines, tmp_path, single_thread, name, problem
):
    result = runner.invoke(app, run_args(tmp_path / "run", f"{MODULE}:{name}"))
    assert result.exit_code == 2, result.output
    flat = " ".join(result.output.split())
    assert "Traceback" not in result.output and len(error_lines(result.output)) <= 3, result.output
    assert f"generation.engine '{MODULE}:{name}' {problem}" in flat and "the contract: cls(model" in flat
    verbose = runner.invoke(app, [*run_args(tmp_path / "verbose", f"{MODULE}:{name}"), "--verbose"])
    assert verbose.exit_code == 2 and "Traceback" in verbose.output and len(error_lines(verbose.output)) <= 3


def test_the_run_resumes_once_the_engine_is_fixed(user_engines, tmp_path, single_thread):
    import faulty_user_engines

    out = tmp_path / "run"
    failed = runner.invoke(app, run_args(out, f"{MODULE}:Flaky"))
    assert failed.exit_code == 2 and "generate raised RuntimeError: not fixed yet" in failed.output, failed.output
    faulty_user_engines.MODE["flaky"] = "ok"
    resumed = runner.invoke(app, ["evolve", "--resume", str(out)])
    assert resumed.exit_code == 0, resumed.output
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]
