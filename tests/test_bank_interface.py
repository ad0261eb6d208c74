"""The declared bank interface: the local and the Ray bank both implement every method of
:class:`evolora.bank.Bank` with the same parameters, and code types its banks with it."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from evolora.bank import BANK_METHODS, Bank, LocalBank
from evolora.bank.local import AdapterBank
from evolora.distributed.sharded_bank import ShardedBank

ROOT = Path(__file__).resolve().parents[1]


def _parameters(function) -> list[str]:
    return [p for p in inspect.signature(function).parameters if p not in ("self", "options", "settings")]


@pytest.mark.parametrize("bank_class", [AdapterBank, ShardedBank])
@pytest.mark.parametrize("method", BANK_METHODS)
def test_both_banks_implement_every_method_with_its_parameters(bank_class, method):
    assert callable(getattr(bank_class, method, None)), f"{bank_class.__name__} lacks {method}"
    declared = _parameters(getattr(Bank, method))
    actual = _parameters(getattr(bank_class, method))
    assert actual[: len(declared)] == declared or set(declared) <= set(actual), (bank_class.__name__, method, actual)


def test_a_local_bank_is_a_bank_at_runtime(tiny):
    model, _ = tiny
    bank = AdapterBank(model, ["S0"], rank=2, alpha=4, target_modules=("q_proj", "v_proj"))
    assert isinstance(bank, Bank) and isinstance(bank, LocalBank)
    assert not isinstance(object(), Bank)


def test_every_bank_parameter_is_typed_with_the_interface():
    untyped = []
    for path in [*ROOT.glob("evolora/**/*.py"), *ROOT.glob("operators/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                    if arg.arg == "bank" and (arg.annotation is None or "Bank" not in ast.unparse(arg.annotation)):
                        untyped.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not untyped, f"bank parameters without the Bank interface: {untyped}"


def test_a_local_bank_leaks_no_future_warning(tiny):
    """PEFT reads transformers' deprecated ``is_gradient_checkpointing``; a user of the API sees nothing."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        AdapterBank(tiny[0], ["s0", "s1"], rank=2, alpha=4, target_modules=("q_proj",))
