"""bank_from_config: the bank a config's ``lora`` and ``generation.engine`` ask for, on a tiny random model."""

from __future__ import annotations

import pytest
from run_helpers import config_with

from evolora.bank.from_config import bank_from_config


@pytest.mark.parametrize(
    ("lora", "engine", "targets"),
    [
        ({"rank": 2, "alpha": 3.0, "target_modules": ["q_proj", "v_proj"]}, "peft", ("q_proj", "v_proj")),
        ({"rank": 4, "alpha": 8.0}, "eager", None),  # all-linear
    ],
)
def test_the_bank_carries_the_configs_lora_and_engine(tiny, single_thread, lora, engine, targets):
    model, tokenizer = tiny
    config = config_with(lora=lora, generation={"engine": engine})
    bank = bank_from_config(model, tokenizer, ["S0", "S1"], config)
    assert bank.slots == ["S0", "S1"] and bank.rank == lora["rank"] and bank.alpha == lora["alpha"]
    assert bank.engine.name == engine and bank.engine.tokenizer is tokenizer
    assert bank.target_modules == targets if targets else {"q_proj", "down_proj"} <= set(bank.target_modules)
    names = {name.rsplit(".", 1)[-1] for name in bank.layers}
    assert names == set(bank.target_modules)
    factors = bank.get_factors("S1")
    assert all(a.shape[0] == b.shape[1] == lora["rank"] for a, b in factors.values())
    assert {layer.scaling["S1"] for layer in bank.layers.values()} == {lora["alpha"] / lora["rank"]}


def test_no_slot_is_refused(tiny):
    model, tokenizer = tiny
    with pytest.raises(ValueError, match="at least one slot"):
        bank_from_config(model, tokenizer, [], config_with())


def test_a_ray_workers_plain_dict_builds_the_bank_the_config_builds(tiny, single_thread):
    from evolora.bank.from_config import bank_from_lora

    model, tokenizer = tiny
    config = config_with(lora={"rank": 2, "alpha": 3.0, "target_modules": ["q_proj", "v_proj"]})
    lora = config.lora.model_dump(mode="json")  # what ShardedBank sends each worker: lists, not tuples
    assert lora["target_modules"] == ["q_proj", "v_proj"]
    bank = bank_from_lora(model, tokenizer, ("S0",), lora, "eager")
    assert bank.slots == ["S0"] and bank.target_modules == ("q_proj", "v_proj") and bank.engine.name == "eager"
    assert (bank.rank, bank.alpha) == (2, 3.0)
    with pytest.raises(KeyError, match="rank"):
        bank_from_lora(model, tokenizer, ["S0"], {"alpha": 3.0, "target_modules": "all-linear"})
