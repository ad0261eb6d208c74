"""A tiny random Llama with a character-level tokenizer: offline, built in milliseconds.

Used by the unit tests and by ``model.name: tiny-random`` for end-to-end smoke runs.
"""

from __future__ import annotations

import string
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

TINY_CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
"""The shape of :func:`tiny_model` with its defaults (read by config checks without building it)."""

TINY_SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
"""Special tokens of the tiny tokenizer, with ids 0..3."""

TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<s>{{ message['role'] }}\n{{ message['content'] }}</s>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)
"""Renders ``[{"role": "user", "content": "hi"}]`` as ``"<s>user\\nhi</s>\\n<s>assistant\\n"``."""


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Character-level tokenizer over printable ASCII + newline, with a chat template.

    Ids 0..3 are ``<pad>``, ``<s>``, ``</s>``, ``<unk>``; then ``"\\n"`` and the 95 printable
    ASCII characters (100 tokens). Any other character encodes to ``<unk>``. Pads on the left.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    characters = "\n" + "".join(chr(code) for code in range(32, 127))
    assert set(string.printable) - set("\t\r\x0b\x0c") <= set(characters)
    vocab = {token: index for index, token in enumerate(TINY_SPECIAL_TOKENS)}
    vocab.update({char: len(TINY_SPECIAL_TOKENS) + i for i, char in enumerate(characters)})
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    return tokenizer


def tiny_model(
    seed: int = 0, vocab: int = 128, hidden: int = 64, layers: int = 2
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """A tiny random Llama and its character-level tokenizer; builds in milliseconds, offline.

    Args:
        seed: seeds the weight initialisation (the global torch RNG is left untouched).
        vocab: embedding rows, >= 100 (the tokenizer's size); extra rows are never produced
            by the tokenizer but may be sampled (they decode to nothing).
        hidden: hidden size, a multiple of 4 (4 attention heads, 2 key/value heads).
        layers: number of decoder layers.

    Returns:
        ``(model, tokenizer)``: model in eval mode (parameters still trainable; use
        ``load_base("tiny-random")`` for a frozen one), pad/eos/bos ids set in its config and
        generation config; tokenizer as in :func:`tiny_tokenizer`.

    Raises:
        ValueError: ``vocab`` smaller than the tokenizer or ``hidden`` not a multiple of 4.
    """
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = tiny_tokenizer()
    if vocab < len(tokenizer):
        raise ValueError(f"vocab must be >= {len(tokenizer)} (the tokenizer's size), got {vocab}.")
    if hidden % 4 != 0 or hidden <= 0:
        raise ValueError(f"hidden must be a positive multiple of 4 (4 heads), got {hidden}.")
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model.eval()
    return model, tokenizer
