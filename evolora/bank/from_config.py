"""The in-process adapter bank a config asks for: one place that reads its ``lora`` section.

    bank = bank_from_config(model, tokenizer, ["S0", "S1"], config)   # rank, alpha, targets, engine
    bank = bank_from_lora(model, tokenizer, slots, lora, engine)       # the section as a plain dict

A run (:class:`evolora.run.Run`), the re-evaluation of a finished run
(:func:`evolora.evaluation.rerun.load_members`), the benchmarks and each Ray worker
(:class:`evolora.distributed.actor.Worker`, which receives the section as a dict) build their bank
here, so the same config builds the same bank everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from evolora.bank.local import AdapterBank

if TYPE_CHECKING:
    from evolora.config import Config
    from evolora.hf_types import CausalLM, Tokenizer


def bank_from_config(model: CausalLM, tokenizer: Tokenizer | None, slots: list[str], config: Config) -> AdapterBank:
    """An :class:`AdapterBank` of ``slots`` on ``model`` with ``config.lora``'s rank, alpha and target
    modules, rolling out with ``config.generation.engine``. Its factors are PEFT's initial ones:
    the caller draws or loads each slot's (``init_factors``, ``load_adapter``).

    Args:
        model: the frozen base model (wrapped in place, as :class:`AdapterBank` does).
        tokenizer: its tokenizer (None: a bank that only scores and trains, never generates).
        slots: the adapter names (at least one).
        config: a loaded config (:func:`evolora.config.load_config`); only ``lora`` and
            ``generation.engine`` are read.

    Raises:
        ValueError: no slots, a rank the target modules cannot carry, or an engine that cannot run
            on ``model`` (as :class:`AdapterBank` raises them).
    """
    return bank_from_lora(model, tokenizer, slots, config.lora.model_dump(), config.generation.engine)


def bank_from_lora(
    model: CausalLM, tokenizer: Tokenizer | None, slots: list[str], lora: Mapping[str, Any], engine: str = "auto"
) -> AdapterBank:
    """:func:`bank_from_config` from the ``lora`` section as a plain dict (``config.lora.model_dump()``,
    JSON or not: what a Ray worker receives) and the ``generation.engine`` name.

    Args:
        lora: ``rank`` (≥ 1), ``alpha`` (> 0) and ``target_modules`` (``all-linear`` or a list or
            tuple of leaf module names); other keys (``init_b_std``) are not read here.
        engine: ``generation.engine`` (``auto``: resolved on ``model``'s device).

    Raises:
        KeyError: ``lora`` lacks one of those keys.
        ValueError: as :func:`bank_from_config`.
    """
    targets = lora["target_modules"]
    return AdapterBank(
        model,
        list(slots),
        rank=lora["rank"],
        alpha=lora["alpha"],
        target_modules=targets if isinstance(targets, str) else tuple(targets),
        tokenizer=tokenizer,
        engine=engine,
    )
