"""Fault class "caches": the base-answer cache (evolora.evaluation.base_cache) proves what it holds.

Its key covers everything that decides an entry's content (weights anywhere in a tensor, tokenizer,
dtype, decoding, task and its grading settings such as ``tolerance``, item texts), and every entry is
checked against its SHA-256 on read: an altered, truncated or foreign entry is never used; one log
line says so, the base is evaluated again and the entry rewritten."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from evolora.bank.local import AdapterBank
from evolora.evaluation import held_out_accuracy
from evolora.evaluation.base_cache import base_key
from evolora.generation.rollout import chat_prompt
from evolora.model import load_base
from evolora.tasks import make_task

LOGGER = "evolora.evaluation.base_cache"


@pytest.fixture
def setup(tiny_config, single_thread):
    model, tokenizer = load_base("tiny-random")
    bank = AdapterBank(model, ["A"], rank=2, alpha=4, target_modules=("q_proj", "v_proj"), tokenizer=tokenizer)
    eval_config = tiny_config.eval.model_copy(
        update={"enabled": True, "base": True, "cache_base": True, "limit": 4, "max_new_tokens": 4}
    )
    return bank, tokenizer, eval_config


def evaluate(setup, task=None):
    bank, tokenizer, eval_config = setup
    results, _ = held_out_accuracy(bank, tokenizer, task or make_task("arith"), {}, eval_config, seed=0)
    return results["base"]


def entries(tmp_path) -> list:
    return sorted((tmp_path / "held_out").glob("*.json"))


def key_of(setup, task, *, tokenizer=None, prompts_of=None) -> str:
    bank, default_tokenizer, eval_config = setup
    tokenizer = tokenizer or default_tokenizer
    import random

    items = task.held_out(4, random.Random(0))
    prompts = [chat_prompt(default_tokenizer, task.held_out_prompt(item)) for item in items]
    return base_key(bank, task, items, prompts, eval_config.max_new_tokens, tokenizer=tokenizer)


def test_a_valid_entry_is_used(setup, tmp_path):
    first = evaluate(setup)
    assert "cached" not in first and len(entries(tmp_path)) == 1
    assert evaluate(setup) == {**first, "cached": True}


@pytest.mark.parametrize(
    "damage, reason",
    [
        ("labels", "its content does not match its SHA-256"),
        ("truncate", "damaged: not JSON"),
        ("key", "it holds another key"),
        ("old", "format None, not 2"),
    ],
    ids=["altered-labels", "truncated", "another-key", "old-format"],
)
def test_a_damaged_or_altered_entry_is_rebuilt_with_one_line(damage, reason, setup, tmp_path, caplog):
    first = evaluate(setup)
    (path,) = entries(tmp_path)
    entry = json.loads(path.read_text())
    if damage == "labels":  # poisoned: the base "answered" every item correctly
        entry["labels"] = ["correct"] * len(entry["labels"])
        path.write_text(json.dumps(entry))
    elif damage == "truncate":
        path.write_text(path.read_text()[: len(path.read_text()) // 2])
    elif damage == "key":
        entry["key"] = "0" * 64
        path.write_text(json.dumps(entry))
    else:  # an entry of the layout before content hashes
        path.write_text(json.dumps({"texts": entry["texts"], "labels": ["correct"] * len(entry["labels"])}))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        again = evaluate(setup)
    assert again == first, "the damaged entry was used"
    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert str(path) in lines[0] and reason in lines[0] and "evaluating the base again" in lines[0]
    caplog.clear()
    assert evaluate(setup) == {**first, "cached": True}  # rewritten, and valid again
    assert not [r for r in caplog.records if r.name == LOGGER]


def test_a_grading_setting_changes_the_key(setup):
    assert key_of(setup, make_task("arith")) == key_of(setup, make_task("arith"))
    assert key_of(setup, make_task("arith", tolerance=0.5)) != key_of(setup, make_task("arith"))


def test_the_tokenizer_changes_the_key(setup):
    import copy

    task = make_task("arith")
    bank, tokenizer, _ = setup
    other = copy.deepcopy(tokenizer)
    other.chat_template = (tokenizer.chat_template or "") + "{# another template #}"
    assert key_of(setup, task, tokenizer=other) != key_of(setup, task)


def test_a_weight_changed_past_the_first_values_of_a_tensor_changes_the_key(setup):
    task = make_task("arith")
    bank = setup[0]
    before = key_of(setup, task)
    name, weight = next((n, p) for n, p in bank.model.named_parameters() if "lora_" not in n and p.numel() > 64)
    with torch.no_grad():
        weight.view(-1)[-1] += 1.0
    assert key_of(setup, task) != before, f"a change at the end of {name} kept the key"
