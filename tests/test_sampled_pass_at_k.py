"""Sampled pass@k of a run's members and the base: the estimator over real sampled counts, replayed
by seed, written to the summary, and reported by ``evolora evaluate --samples``."""

from __future__ import annotations

import json
import random

import pytest
import torch
from run_helpers import finished_arith_run
from typer.testing import CliRunner

from evolora.bank.local import AdapterBank
from evolora.cli import app
from evolora.evaluation.sampled import check_options, correct_counts, pass_at_k_record
from evolora.generation.routed import BASE
from evolora.model import load_base
from evolora.tasks import ArithTask
from evolora.tasks.base import Grade


class EvenLengthArith(ArithTask):
    """Arith whose held-out grader calls an answer correct when its text has an even length: on the
    tiny random model that makes counts spread over 0..n, which real arith answers would not."""

    def grade_held_out(self, completions, items):
        return [Grade("correct" if len(text) % 2 == 0 else "wrong", None) for text in completions]


def _counts(seed):
    model, tokenizer = load_base("tiny-random")
    bank = AdapterBank(model, ["A"], rank=4, alpha=8, target_modules="all-linear", tokenizer=tokenizer)
    bank.init_factors("A", torch.Generator().manual_seed(0), b_std=0.3)
    task = EvenLengthArith()
    items = task.held_out(6, random.Random(0))
    return correct_counts(
        bank,
        tokenizer,
        task,
        items,
        ["A", BASE],
        samples=8,
        temperature=1.0,
        max_new_tokens=6,
        batch_size=16,
        seed=seed,
    )


def test_counts_replay_by_seed_and_the_record_follows_the_estimator(single_thread):
    counts = _counts(seed=3)
    assert counts == _counts(seed=3)
    assert set(counts) == {"A", BASE} and all(len(c) == 6 and all(0 <= x <= 8 for x in c) for c in counts.values())
    spread = [x for c in counts.values() for x in c]
    assert len(set(spread)) > 1  # sampled answers differ
    for c in counts.values():
        record = pass_at_k_record(c, 8, (1, 4, 8, 16))
        assert set(record) == {"pass@1", "pass@4", "pass@8"}  # k > n left out
        assert record["pass@1"] == pytest.approx(sum(c) / (8 * len(c)))
        assert record["pass@8"] == pytest.approx(sum(x > 0 for x in c) / len(c))
        assert record["pass@1"] <= record["pass@4"] <= record["pass@8"]


def test_bad_options_are_refused_before_anything_loads():
    for samples, temperature, ks, what in (
        (0, 1.0, (1,), "--samples"),
        (4, 0.0, (1,), "--temperature"),
        (4, 1.0, (8,), "--k"),
        (4, 1.0, (), "--k"),
    ):
        with pytest.raises(ValueError, match=what):
            check_options(samples, temperature, ks)
    with pytest.raises(ValueError, match="at least one problem"):
        pass_at_k_record([], 4, (1,))


def test_evaluate_samples_writes_pass_at_k_for_every_member_and_the_base(tiny_config, tmp_path, single_thread):
    _, greedy = finished_arith_run(tiny_config, tmp_path)
    before = json.loads((tmp_path / "final" / "summary.json").read_text())
    done = CliRunner().invoke(app, ["evaluate", str(tmp_path), "--samples", "4", "--k", "1,2,4"])
    assert done.exit_code == 0, done.output
    after = json.loads((tmp_path / "final" / "summary.json").read_text())
    record = after.pop("pass_at_k")
    assert after == before  # the greedy numbers are left as they are
    assert record["samples"] == 4 and set(record["members"]) == set(greedy)
    for member in record["members"].values():
        assert len(member["correct_counts"]) == record["limit"] == greedy["base"]["total"]
        assert member["pass@1"] == pytest.approx(sum(member["correct_counts"]) / (4 * record["limit"]))
    assert "pass@4" in done.output
    bad = CliRunner().invoke(app, ["evaluate", str(tmp_path), "--samples", "2", "--k", "4,8"])
    assert bad.exit_code == 2 and "--k" in bad.output


def test_base_rows_sample_the_same_answers_whatever_adapters_are_evaluated_beside_them(single_thread):
    """The base's sampled answers do not depend on the bank's other slots or on the rows around
    them: co-batched adapter rows leave base rows bit-identical (no ΔW leaks into them), and each
    slot's draws come from its own generator."""
    import torch
    from bank_helpers import random_bank

    from evolora.generation.rollout import chat_prompt
    from evolora.generation.types import Sampling
    from evolora.model import load_base
    from evolora.tasks import ArithTask

    model, tokenizer = load_base("tiny-random")
    bank = random_bank(model, ["a", "b"], target_modules="all-linear", b_std=1.0, tokenizer=tokenizer)
    prompt = chat_prompt(tokenizer, [{"role": "user", "content": "What is 3 + 4?"}])

    def texts(rows):
        out = bank.rollout(
            [prompt] * len(rows),
            rows,
            Sampling(max_new_tokens=6, temperature=1.0),
            batch_size=16,
            generator=torch.Generator().manual_seed(0),
        )
        return [c.text for c in out]

    pure, shared = texts([BASE] * 16), texts([BASE] * 8 + ["a"] * 8)
    assert pure[:8] == shared[:8] and shared[8:] != pure[8:]  # base rows unchanged; adapter rows differ
    task, items = ArithTask(), ArithTask().held_out(6)
    options = dict(samples=4, temperature=1.0, max_new_tokens=6, batch_size=8, seed=0)
    alone = correct_counts(bank, tokenizer, task, items, [BASE], **options)
    beside = correct_counts(bank, tokenizer, task, items, ["a", "b", BASE], **options)
    assert alone[BASE] == beside[BASE]
