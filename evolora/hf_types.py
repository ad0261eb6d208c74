"""Type aliases for the two Hugging Face objects that travel through evolora: the base model and its
tokenizer. Importing this module imports nothing heavy (the names resolve for type checkers and
IDEs only); annotate ``model: CausalLM`` and ``tokenizer: Tokenizer``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["CausalLM", "Tokenizer"]

CausalLM: TypeAlias = "PreTrainedModel"
"""A ``transformers`` causal language model (the frozen base, with or without PEFT's LoRA layers)."""

Tokenizer: TypeAlias = "PreTrainedTokenizerBase"
"""The base model's ``transformers`` tokenizer (fast or slow)."""
