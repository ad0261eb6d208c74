"""The run's selection, crossover and mutation, looked up in the operator registry by name.

Kept free of model code (torch only), so config validation can call it before anything loads.
"""

from __future__ import annotations

from dataclasses import dataclass

from evolora.operators import REGISTRY, OperatorSpec


@dataclass(frozen=True)
class Operators:
    """The three operators of a run with their validated parameters."""

    selection: tuple[OperatorSpec, dict]
    crossover: tuple[OperatorSpec, dict]
    mutation: tuple[OperatorSpec, dict]


def resolve_operators(config) -> Operators:
    """Look up and validate ``config.selection/crossover/mutation`` (an :class:`EvolutionConfig`).

    Raises:
        ValueError: "evolution.<kind>: ..." for an unknown operator or parameter, or a value out
            of range (the message lists what is allowed).
    """
    resolved = {}
    for kind in ("selection", "crossover", "mutation"):
        choice = getattr(config, kind)
        try:
            params = REGISTRY.validate(kind, choice.name, choice.params)
        except (ValueError, TypeError, ImportError) as error:
            raise ValueError(f"evolution.{kind}: {error}") from None
        resolved[kind] = (REGISTRY.get(kind, choice.name), params)
    return Operators(**resolved)
