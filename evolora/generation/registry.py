"""The engines ``generation.engine`` may name, and where the graph engine runs.

Kept free of model code (torch only), so a config is checked with it before anything loads.
An engine is registered under a name, as operators are (:mod:`evolora.operators.registry`):

* the engines that ship (``eager``, ``graph``, ``peft``), registered by their ``module:Class`` path
  and imported on first use;
* a user's own, with :func:`register_engine` on import, or named in YAML as
  ``generation.engine: my_pkg.engines:MyEngine`` (imported when the config loads);
* ``auto``: ``graph`` where :func:`check_graph` lets it run, else ``eager`` (:func:`resolve_engine`).

An engine class is called once per bank as ``cls(model, tokenizer, bank)`` and keeps
:class:`evolora.generation.engine.Engine`'s contract (``generate``, ``logprobs``, ``refresh``,
``name``, ``batch_size``); ``evolora engines`` lists the registered ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from evolora.registry import Registry, load_target, summary

SUPPORTED = ("llama", "mistral", "qwen2", "qwen3")
"""``config.model_type`` values whose decoder layer the graph engine's step computes
(:func:`evolora.generation.static_step.decode_step`)."""

AUTO = "auto"
"""The engine name that picks ``graph`` where it runs, else ``eager``."""


@dataclass(frozen=True)
class EngineSpec:
    """One registered engine: its ``name``, the ``target`` it is imported from (``module:Class``),
    a one-line ``doc`` and ``where`` it runs."""

    name: str
    target: str
    doc: str
    where: str = "any device"

    def load(self) -> Callable:
        """The engine class (imported on first use); a user's own is wrapped by
        :func:`evolora.generation.user_engine.guard_engine`, so it fails with its name.

        Raises:
            ValueError: the module cannot be imported, lacks the attribute, or it is not callable.
        """
        found = load_target(self.target, f"generation.engine {self.name!r}", "Class")
        from evolora.generation.user_engine import guard_engine
        from evolora.user_code import is_users

        return guard_engine(found, self.name) if is_users(found) else found  # a user's fails with its name


def _user_engine(target: str) -> EngineSpec:
    """The spec of a user's ``module:Class`` (its class imported now)."""
    return EngineSpec(target, target, summary(EngineSpec(target, target, "").load()))


ENGINES: dict[str, EngineSpec] = {}
"""Registered engines by name (the shipped ones, then a user's)."""

_ENGINES = Registry(
    "generation.engine",
    form="Class",
    entries=ENGINES,
    reserved=(AUTO,),
    origin=lambda spec: spec.target,
    build=_user_engine,
)


def register_engine(
    name: str, target: str | None = None, *, doc: str = "", where: str = "any device"
) -> Callable[[type], type]:
    """Register an engine class under ``name``; as a decorator, ``@register_engine("mine")`` on the
    class (``target`` from its module and name, ``doc`` from its docstring's first line).

    Raises:
        ValueError: ``name`` is empty, ``auto``, contains ``:`` or is already registered.
    """
    return _ENGINES.register_target(name, target, doc, lambda target, doc: EngineSpec(name, target, doc, where))


register_engine(
    "eager",
    "evolora.generation.engine:EagerEngine",
    where="any device",
    doc="routed LoRA in the preallocated-cache decode loop: the CPU engine and the reference",
)
register_engine(
    "graph",
    "evolora.generation.engine:GraphEngine",
    where=f"CUDA; {', '.join(SUPPORTED)}",
    doc="static KV cache and one captured CUDA-graph decode step per batch-size bucket",
)
register_engine(
    "peft",
    "evolora.generation.engine:PeftEngine",
    where="any device",
    doc="transformers' generate with PEFT's adapter_names: the slow, independent reference",
)


def engine_spec(name: str) -> EngineSpec:
    """The spec of a registered ``name``, or of ``module:Class`` (registered under that string on
    first use, its class imported then). ``auto`` is resolved first (:func:`resolve_engine`).

    Raises:
        ValueError: an unknown name (the message lists the registered ones) or a target that does
            not import.
    """
    return _ENGINES.get(name)


def check_graph(device: torch.device | str | None = None, model_type: str | None = None) -> None:
    """Refuse the graph engine where it cannot run: the one place that says where it runs.

    Args:
        device: the model's device (None: not known yet, e.g. ``model.device: auto``).
        model_type: the model's ``config.model_type`` (None: not known yet).

    Raises:
        ValueError: ``device`` is not a CUDA device, or the graph step does not compute
            ``model_type``'s layers (:data:`SUPPORTED`); the message says which engine to use.
    """
    if device is not None and torch.device(device).type != "cuda":
        raise ValueError(
            f"generation.engine=graph needs a CUDA device (the model is on {device}); "
            f"set generation.engine={AUTO} or eager"
        )
    if model_type is not None and model_type not in SUPPORTED:
        raise ValueError(
            f"generation.engine=graph computes {', '.join(SUPPORTED)} decoder layers, not "
            f"{model_type!r}; set generation.engine={AUTO} or eager"
        )


def resolve_engine(name: str, device: torch.device | str | None = None, model_type: str | None = None) -> str:
    """The registered name ``name`` stands for on ``device`` for a model of ``model_type`` (None: not
    known yet): ``auto`` is ``graph`` where :func:`check_graph` lets it run (a known CUDA device),
    else ``eager``; other names are checked (:func:`engine_spec`) and returned as given.

    Raises:
        ValueError: an unknown name or a target that does not import, or ``graph`` where it cannot
            run (:func:`check_graph`).
    """
    if name == AUTO:
        if device is None:
            return "eager"
        try:
            check_graph(device, model_type)
        except ValueError:
            return "eager"
        return "graph"
    engine_spec(name)
    if name == "graph":
        check_graph(device, model_type)
    return name
