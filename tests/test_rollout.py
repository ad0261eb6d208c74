"""Mixed-adapter rollouts equal one-adapter-at-a-time rollouts (greedy)."""

from __future__ import annotations

import pytest
from bank_helpers import random_bank

from evolora.bank.local import AdapterBank
from evolora.generation.rollout import RolloutStats, chat_prompt
from evolora.generation.routed import BASE
from evolora.generation.types import Sampling

GREEDY = Sampling(max_new_tokens=12, greedy=True)


@pytest.mark.parametrize("engine", ["eager", "peft"])
def test_mixed_batch_equals_per_adapter_generation(tiny, engine):
    model, tokenizer = tiny
    bank = random_bank(
        model,
        ["A0", "A1"],
        target_modules=("q_proj", "v_proj", "down_proj"),
        b_std=0.5,
        seed=1,
        tokenizer=tokenizer,
        engine=engine,
    )
    prompts = [chat_prompt(tokenizer, [{"role": "user", "content": text}]) for text in ("hi", "what is 2+2?", "x")]
    names = ["A0", "A1", BASE]
    stats = RolloutStats()
    mixed = bank.rollout(prompts, names, GREEDY, stats=stats)
    alone = [bank.rollout([p], [n], GREEDY)[0] for p, n in zip(prompts, names)]
    assert [c.completion_ids for c in mixed] == [c.completion_ids for c in alone]
    assert stats.tokens == sum(len(c.completion_ids) for c in mixed) and stats.seconds > 0
    # adapters make a difference: A0 and the base disagree on the same prompt
    a0 = bank.rollout([prompts[0]] * 2, ["A0", BASE], GREEDY)
    assert a0[0].completion_ids != a0[1].completion_ids


def test_completions_stop_at_eos_and_keep_prompt(tiny):
    model, tokenizer = tiny
    bank = AdapterBank(model, ["A0"], rank=2, alpha=4, target_modules=("q_proj",), tokenizer=tokenizer)
    prompt = chat_prompt(tokenizer, [{"role": "user", "content": "hello"}])
    (completion,) = bank.rollout([prompt], ["A0"], Sampling(max_new_tokens=20))
    assert completion.prompt_ids == tuple(prompt)
    eos = tokenizer.eos_token_id
    assert eos not in completion.completion_ids[:-1]
    assert completion.truncated == (completion.completion_ids[-1:] != (eos,))
