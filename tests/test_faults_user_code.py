"""Fault class "user code": a user's own operator (``module:function`` in YAML) that raises, or returns
what breaks its contract (non-finite values, a wrong shape or rank, a wrong type, indices out of
range), is reported in at most 3 lines naming the config key, the operator and its contract (exit 2);
``--verbose`` adds the traceback; the run resumes once the operator is fixed. evolora's own
operators are not wrapped."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch
from run_helpers import TOY_ARGS
from typer.testing import CliRunner

from evolora.cli import app
from evolora.config import load_config
from evolora.config.operator_choice import CONTRACTS, guard_operator, resolve_operators
from evolora.io import read_jsonl
from evolora.operators import REGISTRY
from evolora.user_code import UserCodeError

MODULE = "faulty_user_ops"
SOURCE = textwrap.dedent("""
    import torch

    MODE = {"flaky": "raise"}


    def raising(parent, *, generator, scale=1.0):
        raise ZeroDivisionError("division by zero in my mutation")


    def nan_child(parent, *, generator):
        return {name: (a * float("nan"), b.clone()) for name, (a, b) in parent.items()}


    def wrong_rank(parent, *, generator):
        return {name: (a[:1].clone(), b[:, :1].clone()) for name, (a, b) in parent.items()}


    def not_an_adapter(parent, *, generator):
        return [1, 2]


    def extra_dimension(parents, fitness, *, generator):
        return {name: (a.unsqueeze(0), b) for name, (a, b) in parents[0].items()}


    def out_of_range(fitness, num, *, generator):
        return torch.full((num,), len(fitness))


    def float_indices(fitness, num, *, generator):
        return torch.zeros(num)


    def flaky(parent, *, generator):
        if MODE["flaky"] == "raise":
            raise RuntimeError("not fixed yet")
        return {name: (a.clone(), b.clone()) for name, (a, b) in parent.items()}
""")
runner = CliRunner()


@pytest.fixture
def user_ops(tmp_path, monkeypatch):
    """``faulty_user_ops``, importable from the current folder as a user's module is."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    _forget_user_ops()  # a fresh import each test
    yield
    _forget_user_ops()  # and none left in the registry for other tests


def _forget_user_ops() -> None:
    """Drop ``faulty_user_ops`` from the imported modules and from the operator registry."""
    sys.modules.pop(MODULE, None)
    for kind in ("selection", "crossover", "mutation"):
        for name in [n for n in REGISTRY.names(kind) if n.startswith(f"{MODULE}:")]:
            REGISTRY._specs[kind].pop(name)


def adapter(rank: int = 2) -> dict:
    generator = torch.Generator().manual_seed(0)
    return {
        "q": (torch.randn(rank, 6, generator=generator), torch.randn(5, rank, generator=generator)),
        "v": (torch.randn(rank, 6, generator=generator), torch.randn(4, rank, generator=generator)),
    }


def operators(**choices):
    config = load_config("tasks/gsm.yaml", [f"evolution.{kind}={name}" for kind, name in choices.items()])
    return resolve_operators(config.evolution)


@pytest.mark.parametrize(
    "name, problem",
    [
        ("raising", "raised ZeroDivisionError: division by zero in my mutation"),
        ("nan_child", "returned non-finite values (NaN or inf) in module 'q'"),
        ("wrong_rank", "returned shapes A (1, 6), B (5, 1) for module 'q', not (2, 6), (5, 2)"),
        ("not_an_adapter", "returned a list, not an adapter"),
    ],
)
def test_a_mutation_breaking_its_contract_is_named(name, problem, user_ops):
    spec, params = operators(mutation=f"{MODULE}:{name}").mutation
    with pytest.raises(UserCodeError) as caught:
        spec.fn(adapter(), generator=torch.Generator(), **params)
    message = str(caught.value)
    assert message == f"evolution.mutation '{MODULE}:{name}' {problem}; the contract: {CONTRACTS['mutation']}"
    assert "\n" not in message and len(message) < 400


def test_a_crossover_and_a_selection_breaking_their_contracts_are_named(user_ops):
    chosen = operators(crossover=f"{MODULE}:extra_dimension", selection=f"{MODULE}:out_of_range")
    spec, params = chosen.crossover
    with pytest.raises(
        UserCodeError,
        match=r"evolution.crossover 'faulty_user_ops:extra_dimension' returned "
        r"shapes A \(1, 2, 6\)",
    ):
        spec.fn([adapter(), adapter()], [1.0, 0.0], generator=torch.Generator(), **params)
    spec, params = chosen.selection
    with pytest.raises(UserCodeError, match=r"returned indices \[3, 3\] outside \[0, 3\)"):
        spec.fn(torch.tensor([0.1, 0.2, 0.3]), 2, generator=torch.Generator(), **params)
    spec, params = operators(selection=f"{MODULE}:float_indices").selection
    with pytest.raises(UserCodeError, match="returned a torch.float32 tensor, not integer indices"):
        spec.fn(torch.tensor([0.1, 0.2, 0.3]), 2, generator=torch.Generator(), **params)


def test_a_good_user_operator_returns_its_result_and_evolora_operators_are_not_wrapped(user_ops):
    import faulty_user_ops

    faulty_user_ops.MODE["flaky"] = "ok"
    spec, _ = operators(mutation=f"{MODULE}:flaky").mutation
    parent = adapter()
    child = spec.fn(parent, generator=torch.Generator())
    assert all(torch.equal(child[m][0], parent[m][0]) for m in parent)
    builtin = REGISTRY.get("mutation", "lowrank_gaussian")
    assert guard_operator(builtin, "mutation") is builtin
    assert guard_operator(spec, "mutation") is spec  # wrapped once


def run_args(out, mutation: str) -> list[str]:
    return [
        "evolve",
        "tasks/gsm.yaml",
        "--out",
        str(out),
        *TOY_ARGS,
        "--set",
        f"evolution.mutation={mutation}",
        "--set",
        "evolution.crossover_rate=0",
        "--set",
        "evolution.every=1",
    ]


def error_lines(output: str) -> list[str]:
    lines = output.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("error:"))
    return lines[start:]


def test_the_cli_names_a_failing_operator_in_at_most_3_lines_and_verbose_adds_the_traceback(
    user_ops, tmp_path, single_thread
):
    result = runner.invoke(app, run_args(tmp_path / "run", f"{MODULE}:raising"))
    assert result.exit_code == 2, result.output
    flat = " ".join(result.output.split())
    assert "Traceback" not in result.output and len(error_lines(result.output)) <= 3, result.output
    assert f"evolution.mutation '{MODULE}:raising' raised ZeroDivisionError: division by zero" in flat
    assert "the contract: fn(parent, *, generator, **params) returns one adapter" in flat
    assert f"evolora evolve --resume {tmp_path / 'run'}" in flat
    verbose = runner.invoke(app, [*run_args(tmp_path / "verbose", f"{MODULE}:raising"), "--verbose"])
    assert verbose.exit_code == 2 and "Traceback" in verbose.output and "raise ZeroDivisionError" in verbose.output
    assert len(error_lines(verbose.output)) <= 3


def test_the_run_resumes_once_the_operator_is_fixed(user_ops, tmp_path, single_thread):
    import faulty_user_ops

    out = tmp_path / "run"
    faulty_user_ops.MODE["flaky"] = "raise"
    failed = runner.invoke(app, run_args(out, f"{MODULE}:flaky"))
    assert failed.exit_code == 2 and "raised RuntimeError: not fixed yet" in failed.output, failed.output
    faulty_user_ops.MODE["flaky"] = "ok"
    resumed = runner.invoke(app, ["evolve", "--resume", str(out)])
    assert resumed.exit_code == 0, resumed.output
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2]
