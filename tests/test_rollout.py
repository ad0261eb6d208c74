"""Mixed-adapter rollouts equal one-adapter-at-a-time rollouts (greedy)."""

from __future__ import annotations

from bank_helpers import random_bank
from evolora.bank.local import AdapterBank
from evolora.generation.rollout import RolloutStats, chat_prompt, generate
from evolora.generation.routed import BASE


def test_mixed_batch_equals_per_adapter_generation(tiny):
    model, tokenizer = tiny
    bank = random_bank(model, ["A0", "A1"], target_modules=("q_proj", "v_proj", "down_proj"), b_std=0.5, seed=1)
    prompts = [chat_prompt(tokenizer, [{"role": "user", "content": text}]) for text in ("hi", "what is 2+2?", "x")]
    names = ["A0", "A1", BASE]
    stats = RolloutStats()
    mixed = generate(bank.model, tokenizer, prompts, names, max_new_tokens=12, greedy=True, stats=stats)
    alone = [generate(bank.model, tokenizer, [p], [n], max_new_tokens=12, greedy=True)[0] for p, n in zip(prompts, names)]
    assert [c.completion_ids for c in mixed] == [c.completion_ids for c in alone]
    assert stats.tokens == sum(len(c.completion_ids) for c in mixed) and stats.seconds > 0
    # adapters make a difference: A0 and the base disagree on the same prompt
    a0 = generate(bank.model, tokenizer, [prompts[0]] * 2, ["A0", BASE], max_new_tokens=12, greedy=True)
    assert a0[0].completion_ids != a0[1].completion_ids


def test_completions_stop_at_eos_and_keep_prompt(tiny):
    model, tokenizer = tiny
    bank = AdapterBank(model, ["A0"], rank=2, alpha=4, target_modules=("q_proj",))
    prompt = chat_prompt(tokenizer, [{"role": "user", "content": "hello"}])
    (completion,) = generate(bank.model, tokenizer, [prompt], ["A0"], max_new_tokens=20)
    assert completion.prompt_ids == tuple(prompt)
    eos = tokenizer.eos_token_id
    assert eos not in completion.completion_ids[:-1]
    assert completion.truncated == (completion.completion_ids[-1:] != (eos,))
