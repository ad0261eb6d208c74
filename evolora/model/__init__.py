"""Base models: find, convert once, and load the frozen model every adapter shares.

:mod:`evolora.model.resolve` turns a model name (embedded, ``tiny-random``, a local directory or a
Hugging Face id) into something loadable and checks a LoRA shape against its ``config.json``;
:mod:`evolora.model.load` loads it (:func:`load_base`). The embedded GGUF → safetensors conversion
is :mod:`evolora.model.gguf`, the tiny random test model :mod:`evolora.model.tiny`.
"""

from __future__ import annotations

from evolora.model.load import ModelDtype, end_of_turn_ids, load_base
from evolora.model.resolve import (
    EMBEDDED_MODELS,
    LLAMA_LIKE,
    MODEL_ALIASES,
    TINY_MODEL_NAME,
    ModelNotFoundError,
    cache_dir,
    check_lora_fits,
    check_model_available,
    linear_shapes,
    needs_conversion,
    resolve_model,
)
from evolora.model.tiny import tiny_model

__all__ = [
    "EMBEDDED_MODELS",
    "LLAMA_LIKE",
    "MODEL_ALIASES",
    "TINY_MODEL_NAME",
    "ModelDtype",
    "ModelNotFoundError",
    "cache_dir",
    "check_lora_fits",
    "check_model_available",
    "end_of_turn_ids",
    "linear_shapes",
    "load_base",
    "needs_conversion",
    "resolve_model",
    "tiny_model",
]
