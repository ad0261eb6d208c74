"""Chat templates of other model families: a template without a system role gets the system prompt
folded into the first user turn, and a base model without a template gets a plain one."""

from __future__ import annotations

import doctest

import pytest

from evolora.generation import rollout
from evolora.generation.rollout import PLAIN_TEMPLATE, chat_prompt, fold_system, render_chat
from evolora.model.tiny import tiny_tokenizer

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
NO_SYSTEM = (  # what Gemma 2's template does with a system message
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for m in messages %}<turn>{{ m['role'] }}\n{{ m['content'] }}</turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<turn>model\n{% endif %}"
)


def test_a_template_without_system_role_gets_it_folded_into_the_first_user_turn():
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = NO_SYSTEM
    assert render_chat(tokenizer, MESSAGES) == "<turn>user\nBe brief.\n\n2+2?</turn>\n<turn>model\n"
    assert render_chat(tokenizer, MESSAGES[1:]) == "<turn>user\n2+2?</turn>\n<turn>model\n"
    assert (
        chat_prompt(tokenizer, MESSAGES)
        == tokenizer("<turn>user\nBe brief.\n\n2+2?</turn>\n<turn>model\n", add_special_tokens=False)["input_ids"]
    )


def test_another_template_error_is_not_swallowed():
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = "{{ raise_exception('Conversation roles must alternate') }}"
    with pytest.raises(Exception, match="alternate"):
        render_chat(tokenizer, MESSAGES[1:])


def test_a_base_model_without_template_gets_a_plain_one():
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = None
    assert render_chat(tokenizer, MESSAGES) == "System: Be brief.\n\nUser: 2+2?\n\nAssistant:"
    assert "Assistant" in PLAIN_TEMPLATE


def test_fold_system_without_a_user_turn():
    assert fold_system([{"role": "system", "content": "S"}]) == [{"role": "user", "content": "S"}]
    assert fold_system(MESSAGES[1:]) == MESSAGES[1:]


def test_the_docstring_example_of_fold_system_runs():
    result = doctest.testmod(rollout)
    assert (result.attempted, result.failed) == (1, 0)


def test_a_list_of_end_of_turn_ids_is_kept():
    from evolora.generation.stops import end_of_turn_ids
    from evolora.model import load_base

    model, tokenizer = load_base("tiny-random")
    model.generation_config.eos_token_id = [7, 9]  # Llama 3 style: end of text and end of turn
    assert end_of_turn_ids(model, tokenizer) == {7, 9, tokenizer.eos_token_id}
