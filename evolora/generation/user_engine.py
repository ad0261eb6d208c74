"""A user's own engine (``generation.engine: package.module:Class``, or one registered from outside
evolora) failing with its name.

:func:`guard_engine` wraps such a class: an exception while it is built, or from its ``generate``,
``logprobs`` or ``refresh``, and a result that breaks :data:`CONTRACT` (not one
:class:`~evolora.generation.types.Completion` per prompt by its adapter; log-probs that are not a
(B, T_c) float tensor without NaN) become a :class:`evolora.user_code.UserCodeError` naming
``generation.engine``, the engine and the contract. The command line prints it in at most 3 lines
(``--verbose`` adds the traceback); the run's last checkpoint is intact, so it resumes once fixed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from evolora.generation.types import Completion, RoutedBank
from evolora.user_code import UserCode, argument

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM, Tokenizer

KEY = "generation.engine"
"""The config key that names an engine."""

CONTRACT = (
    "cls(model, tokenizer, bank); generate(prompts, adapters, sampling, ...) -> one Completion per prompt, "
    "row i by adapters[i]; logprobs(names, samples) -> (len(names), T_c) float tensor, no NaN; refresh(slots)"
)
"""What a user's engine takes and returns (:class:`evolora.generation.engine.Engine`)."""


def guard_engine(cls: Callable, name: str) -> Callable:
    """A factory ``build(model, tokenizer, bank)`` that builds ``cls`` and guards the engine's
    methods (on the instance: its class, and so its name in cache keys, stays the user's).

    Args:
        cls: the user's engine class (or factory).
        name: its ``generation.engine`` name, e.g. ``my_pkg.engines:MyEngine``.

    Returns:
        The factory, with ``cls``'s name, module and docstring; it raises
        :class:`~evolora.user_code.UserCodeError` when ``cls`` raises or the engine lacks a method.
    """
    code = UserCode(KEY, name, CONTRACT)

    def build(model: CausalLM, tokenizer: Tokenizer, bank: RoutedBank):
        with code.call(when="while it was built"):
            engine = cls(model, tokenizer, bank)
        for method, check in (("generate", _check_generate), ("logprobs", _check_logprobs), ("refresh", None)):
            function = getattr(engine, method, None)
            if not callable(function):
                raise code.error("", f"has no {method} method")
            setattr(engine, method, code.guard(function, method, check))
        return engine

    functools.update_wrapper(build, cls, updated=())
    return build


def _check_generate(result, args: tuple, kwargs: dict) -> str | None:
    """What is wrong with ``generate``'s ``result`` for ``args = (prompts, adapters, ...)``, or None."""
    prompts, adapters = argument(args, kwargs, 0, "prompts"), argument(args, kwargs, 1, "adapters")
    if not isinstance(result, list):
        return f"returned a {type(result).__name__}, not a list of Completion"
    if len(result) != len(prompts):
        return f"returned {len(result)} completions for {len(prompts)} prompts"
    for row, completion in enumerate(result):
        if not isinstance(completion, Completion):
            return f"returned a {type(completion).__name__} in row {row}, not a Completion"
        if completion.adapter != adapters[row]:
            return f"returned row {row} by adapter {completion.adapter!r}, not {adapters[row]!r}"
    return None


def _check_logprobs(result, args: tuple, kwargs: dict) -> str | None:
    """What is wrong with ``logprobs``'s ``result`` for ``args = (names, samples)``, or None."""
    names = argument(args, kwargs, 0, "names")
    if not isinstance(result, torch.Tensor):
        return f"returned a {type(result).__name__}, not a tensor"
    if not result.dtype.is_floating_point or result.dim() != 2 or result.shape[0] != len(names):
        return f"returned a {result.dtype} tensor of shape {tuple(result.shape)} for {len(names)} samples"
    if bool(torch.isnan(result).any()):
        return "returned NaN log-probs"
    return None
