"""Load the frozen base model every adapter shares, with its left-padding tokenizer, on the
device, in the dtype and with the threads the config names (:func:`load_base`); model names are
resolved by :mod:`evolora.model.resolve`.

This module is I/O at the edge: it never imports upward into orchestration code.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch

from evolora.model.device import resolve_device
from evolora.model.onednn_cache import bound_onednn_caches
from evolora.model.prepack import check_prepack, prepacked
from evolora.model.resolve import TINY_MODEL_NAME, ModelNotFoundError, _embedded_key, resolve_model
from evolora.model.threads import ThreadPolicy
from evolora.model.tiny import tiny_model
from evolora.versions import guard_versions

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM, Tokenizer

logger = logging.getLogger(__name__)

ModelDtype = Literal["auto", "float32", "bfloat16", "float16"]

_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _freeze(model: CausalLM, dtype: torch.dtype) -> CausalLM:
    model = model.to(dtype)
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model


def _set_special_ids(model: CausalLM, tokenizer: Tokenizer) -> None:
    """Give the tokenizer a pad token (eos if none) and copy pad/eos/bos into the model configs.

    The end-of-turn ids are the union of the model's own list and the tokenizer's ``eos_token``:
    Llama 3.x instruct ends a turn with ``<|eot_id|>``, which its generation config lists beside
    ``<|end_of_text|>``; replacing that list by the tokenizer's single eos would let rollouts
    run to the token limit.
    """
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    for config in (model.config, model.generation_config):
        if config is None:
            continue
        config.pad_token_id = tokenizer.pad_token_id
        config.eos_token_id = end_of_turn_ids(config.eos_token_id, tokenizer.eos_token_id)
        if tokenizer.bos_token_id is not None:
            config.bos_token_id = tokenizer.bos_token_id


def end_of_turn_ids(model_ids: int | list[int] | None, tokenizer_id: int | None) -> int | list[int] | None:
    """The model's end-of-turn id(s) with the tokenizer's eos added (an int when only one).

    >>> end_of_turn_ids([128001, 128009], 128001), end_of_turn_ids(None, 2), end_of_turn_ids(7, 2)
    ([128001, 128009], 2, [7, 2])
    """
    ids = [] if model_ids is None else list(model_ids) if isinstance(model_ids, (list, tuple)) else [model_ids]
    if tokenizer_id is not None and tokenizer_id not in ids:
        ids.append(tokenizer_id)
    return ids[0] if len(ids) == 1 else (ids or None)


def load_base(
    name: str,
    *,
    dtype: ModelDtype = "float32",
    num_threads: int | str | None = None,
    device: str = "auto",
    prepack: bool | str = False,
) -> tuple[CausalLM, Tokenizer]:
    """Load a frozen base model and its left-padding tokenizer.

    Args:
        name: ``"tiny-random"``, an embedded name, a local checkpoint directory, or a Hugging
            Face id (see :func:`~evolora.model.resolve.resolve_model`).
        dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` (GPUs without bf16) or ``"auto"``
            (:func:`evolora.model.dtype.auto_dtype` for the resolved device) for the base weights.
        num_threads: an int: ``torch.set_num_threads`` (process-wide) first; ``"auto"``: the free cores
            now (:mod:`evolora.model.threads`); None: torch's default.
        prepack: ``model.prepack`` (:func:`evolora.model.prepack.prepack_model`): the LM head and the
            decoder's linears packed on the CPU.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (:func:`evolora.model.device.resolve_device`,
            resolved before anything loads); the weights move there.

    Returns:
        ``(model, tokenizer)``: the model in eval mode with ``requires_grad=False`` on every
        parameter; the tokenizer pads on the left and has a pad token (eos if it had none).

    Raises:
        ValueError: unknown ``dtype``, ``num_threads < 1``, or a device torch does not see.
        VersionError: a package version evolora is known not to run with (:mod:`evolora.versions`).
        ModelNotFoundError: the model cannot be found locally; the message says how to fix it.
    """
    guard_versions()  # torch, transformers, peft outside the tested range: an error or one warning, once
    device = resolve_device(device)
    if dtype == "auto":
        from evolora.model.dtype import auto_dtype

        dtype = auto_dtype(device)
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be auto or one of {sorted(_DTYPES)}, got {dtype!r}.")
    bound_onednn_caches()  # before the first packed GEMM: a run's many update shapes would grow its memory
    check_prepack(prepack, device, _DTYPES[dtype])  # a setting that cannot hold: refused before anything loads
    ThreadPolicy(num_threads).apply()  # an int (>= 1), auto (the free cores now) or None (torch's default)
    if name == TINY_MODEL_NAME:
        model, tokenizer = tiny_model(seed=0)
        return prepacked(_freeze(model, _DTYPES[dtype]).to(device), prepack), tokenizer

    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve_model(name)
    start = time.perf_counter()
    try:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=_DTYPES[dtype])
        tokenizer = AutoTokenizer.from_pretrained(source, padding_side="left")
    except Exception as error:  # OSError, or safetensors' error on a file damaged after its check
        if isinstance(source, Path) and _embedded_key(name) is not None:
            raise ModelNotFoundError(
                f"the converted model in {source} cannot be loaded ({type(error).__name__}: "
                f"{(str(error).splitlines() or [''])[0][:160]}); clear it with: evolora cache --clear models, "
                "then run again (it is converted again)"
            ) from error
        if isinstance(source, Path) or not isinstance(error, OSError):
            raise
        raise ModelNotFoundError(
            f"Could not load {name!r}: it is not in the local Hugging Face cache and could not be "
            f"downloaded ({error}). Download it where you have network access (e.g. "
            f"`huggingface-cli download {name}`), or give a local directory written by "
            "save_pretrained as the model name."
        ) from error
    tokenizer.padding_side = "left"
    _set_special_ids(model, tokenizer)
    logger.info("loaded %s (%s) in %.1f s", name, dtype, time.perf_counter() - start)
    return prepacked(_freeze(model, _DTYPES[dtype]).to(device), prepack), tokenizer
