"""AdapterBank.set_factors is all-or-nothing: every module is checked before any is written."""

from __future__ import annotations

import pytest
import torch
from bank_helpers import random_bank


@pytest.fixture
def bank(tiny, single_thread):
    model, _ = tiny
    bank = random_bank(model, ["S0", "S1"], target_modules=("q_proj", "v_proj"), b_std=0.1)
    return bank


def _child(bank, slot="S1"):
    """A valid replacement for a slot: the other slot's factors, so every module differs from ``S0``'s."""
    return {name: (a.clone(), b.clone()) for name, (a, b) in bank.get_factors(slot).items()}


def _identical(x, y) -> bool:
    return x.keys() == y.keys() and all(torch.equal(x[k][i], y[k][i]) for k in x for i in (0, 1))


def _break_last(factors, how):
    last = list(factors)[-1]
    a, b = factors[last]
    if how == "nan":
        b = b.clone()
        b[0, 0] = float("nan")
    elif how == "inf":
        a = a.clone()
        a[-1, -1] = float("inf")
    elif how == "overflow":  # finite in float64, Inf once cast to the bank's float32
        b = b.double()
        b[0, 0] = 1e300
    elif how == "shape":
        a = torch.zeros(a.shape[0] + 1, a.shape[1])
    elif how == "integer":
        a = a.to(torch.int64)
    elif how == "missing-b":
        factors[last] = (a, None)
        return factors
    factors[last] = (a, b)
    return factors


@pytest.mark.parametrize("how", ["nan", "inf", "overflow", "shape", "integer", "missing-b"])
def test_a_bad_last_module_leaves_the_slot_bit_identical(bank, how):
    """Once a NaN in the last module raised only after the other modules were overwritten."""
    before = bank.get_factors("S0")
    bad = _break_last(_child(bank), how)
    assert len(bad) == 4  # q_proj and v_proj of the tiny model's 2 layers
    with pytest.raises(ValueError, match=list(bad)[-1].replace(".", r"\.")):
        bank.set_factors("S0", bad)
    assert _identical(bank.get_factors("S0"), before)


@pytest.mark.parametrize("change", ["missing", "unknown"])
def test_module_names_must_match_and_nothing_is_written(bank, change):
    before = bank.get_factors("S0")
    factors = _child(bank)
    if change == "missing":
        factors.pop(list(factors)[-1])
    else:
        factors["model.layers.9.self_attn.q_proj"] = factors[list(factors)[0]]
    with pytest.raises(ValueError, match="do not match the bank"):
        bank.set_factors("S0", factors)
    assert _identical(bank.get_factors("S0"), before)


def test_a_valid_adapter_is_copied_whole_and_cast_to_the_bank_dtype(bank):
    child = {name: (a.double(), b.double()) for name, (a, b) in _child(bank).items()}
    bank.set_factors("S0", child)
    after = bank.get_factors("S0")
    assert _identical(after, bank.get_factors("S1"))
    assert all(a.dtype == torch.float32 for a, _ in after.values())
