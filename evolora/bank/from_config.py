"""The in-process adapter bank a config asks for: one place that reads its ``lora`` section.

    bank = bank_from_config(model, tokenizer, ["S0", "S1"], config)   # rank, alpha, targets, engine

A run (:class:`evolora.run.Run`), the re-evaluation of a finished run
(:func:`evolora.evaluation.rerun.load_members`) and the benchmarks build their bank here, so the
same config builds the same bank everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    lora = config.lora
    return AdapterBank(
        model,
        slots,
        rank=lora.rank,
        alpha=lora.alpha,
        target_modules=lora.target_modules,
        tokenizer=tokenizer,
        engine=config.generation.engine,
    )
