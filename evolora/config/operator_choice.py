"""The run's selection, crossover and mutation, looked up in the operator registry by name.

Kept free of model code (torch only), so config validation can call it before anything loads.
An operator of the user's own (a function outside evolora, ``module:function`` in YAML) is
wrapped by :func:`guard_operator`: an exception it raises, or a result that breaks its kind's
contract (:data:`CONTRACTS`), becomes a :class:`evolora.user_code.UserCodeError` naming it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

from evolora.operators import REGISTRY, OperatorSpec, require_exact
from evolora.user_code import UserCode, argument, is_users

ADAPTER = "{module: (A (r, d_in), B (d_out, r))}"
CONTRACTS = {
    "selection": (
        "fn(fitness (P,), num, *, generator, [cases (P, N) or None,] **params) returns a 1-D integer tensor "
        "of num indices in [0, P)"
    ),
    "crossover": (
        f"fn(parents, fitness, *, generator, **params) returns one adapter {ADAPTER} with the parents' "
        "modules and shapes, every value finite"
    ),
    "mutation": (
        f"fn(parent, *, generator, **params) returns one adapter {ADAPTER} with the parent's modules "
        "and shapes, every value finite"
    ),
}
"""What a user's operator of each kind takes and returns (the registry's call signatures)."""


LOOP_KINDS = ("selection", "crossover", "mutation")
"""The operator kinds of the outer loop, in the order the config names them."""


@dataclass(frozen=True)
class Operators:
    """The three operators of a run with their validated parameters, and those of a role of its own."""

    selection: tuple[OperatorSpec, dict]
    crossover: tuple[OperatorSpec, dict]
    mutation: tuple[OperatorSpec, dict]
    roles: Mapping[str, Operators] = dataclasses.field(default_factory=dict)

    def for_role(self, role: str) -> Operators:
        """The operators that breed ``role`` (``evolution.roles.<role>``, else the section's)."""
        return self.roles.get(role, self)


def resolve_operators(config) -> Operators:
    """Look up and validate ``config.selection/crossover/mutation`` and ``config.roles`` (an
    :class:`EvolutionConfig`).

    Raises:
        ValueError: "evolution.<kind>: ..." (or "evolution.roles.<role>.<kind>: ...") for an unknown
            operator or parameter, or a value out of range (the message lists what is allowed).
    """
    base = {kind: _resolve(kind, getattr(config, kind), f"evolution.{kind}") for kind in LOOP_KINDS}
    roles = {}
    for role, own in config.roles.items():
        kinds = {
            kind: _resolve(kind, getattr(own, kind), f"evolution.roles.{role}.{kind}")
            if getattr(own, kind) is not None
            else base[kind]
            for kind in LOOP_KINDS
        }
        roles[role] = Operators(**kinds)
    return Operators(**base, roles=roles)


def check_sampling(config, operators: Operators, roles: Iterable[str], solver: str) -> None:
    """Refuse ``evolution.sampling: universal`` where a role's selection has no exact chances.

    Universal sampling deals parents over each member's exact chance
    (:func:`evolora.operators.selection_chances`): every built-in selection has them, except
    lexicase on an exam's several cases (those of ``solver``, the role that sits the exam) when
    they are log-probabilities with ε > 0, or 0/1 outcomes with ε ≥ 1. Roles without cases select
    on their fitness as one case, which is exact.

    Args:
        config: the :class:`EvolutionConfig`; operators: its :func:`resolve_operators`;
        roles: the population's roles; solver: the role whose members sit the exam.

    Raises:
        ValueError: "evolution[.roles.<role>].selection: ..." naming the selection and what to change.
    """
    if config.sampling != "universal":
        return
    for role in roles:
        spec, params = operators.for_role(role).selection
        own = role in config.roles and config.roles[role].selection is not None
        key = f"evolution.roles.{role}.selection" if own else "evolution.selection"
        try:
            require_exact(spec.name)
        except ValueError as error:
            raise ValueError(f"{key}: {error}; or use evolution.sampling: independent") from None
        if spec.name == "lexicase" and role == solver and config.fitness.name == "exam":
            epsilon = params["epsilon"]
            exact = epsilon == 0 or (config.fitness.score == "accuracy" and (epsilon is None or epsilon < 1))
            if not exact:
                raise ValueError(
                    f"{key}: evolution.sampling: universal needs lexicase's exact chances on the {role}s' exam "
                    f"cases, known with ε = 0 or on accuracy outcomes with ε < 1 (here ε = {epsilon}, score "
                    f"{config.fitness.score}); set params.epsilon: 0, or evolution.sampling: independent"
                )


def _resolve(kind: str, choice, key: str) -> tuple[OperatorSpec, dict]:
    """(guarded spec, checked params) of the operator ``choice`` of ``kind``, named ``key`` in errors."""
    try:
        params = REGISTRY.validate(kind, choice.name, choice.params)
    except (ValueError, TypeError, ImportError) as error:
        raise ValueError(f"{key}: {error}") from None
    return guard_operator(REGISTRY.get(kind, choice.name), kind), params


def guard_operator(spec: OperatorSpec, kind: str) -> OperatorSpec:
    """``spec`` itself when evolora defines it; for a user's operator, a copy whose function raises
    :class:`~evolora.user_code.UserCodeError` (naming ``evolution.<kind>``, the operator and its
    contract, :data:`CONTRACTS`) when it raises or returns a result that breaks the contract.

    Args:
        spec: the registered operator.
        kind: ``selection``, ``crossover`` or ``mutation``.

    Returns:
        An :class:`~evolora.operators.OperatorSpec` with the same name, parameters and doc.
    """
    if kind not in CONTRACTS or not is_users(spec.fn) or getattr(spec.fn, "__evolora_guarded__", False):
        return spec
    code = UserCode(f"evolution.{kind}", spec.name, CONTRACTS[kind])
    return dataclasses.replace(spec, fn=code.guard(spec.fn, check=CHECKS[kind]))


def _check_selection(result, args: tuple, kwargs: dict) -> str | None:
    """What is wrong with a selection's ``result`` for ``args = (fitness, num)``, or None."""
    fitness, num = argument(args, kwargs, 0, "fitness"), argument(args, kwargs, 1, "num")
    size = len(fitness)
    if not isinstance(result, torch.Tensor):
        return f"returned a {type(result).__name__}, not a tensor"
    if result.dtype == torch.bool or result.dtype.is_floating_point or result.dtype.is_complex:
        return f"returned a {result.dtype} tensor, not integer indices"
    if tuple(result.shape) != (num,):
        return f"returned shape {tuple(result.shape)} for num = {num}"
    if num and not bool(((result >= 0) & (result < size)).all()):
        return f"returned indices {result.tolist()[:8]} outside [0, {size})"
    return None


def _check_crossover(result, args: tuple, kwargs: dict) -> str | None:
    """What is wrong with a crossover's child ``result`` (compared with the first parent), or None."""
    return _check_child(result, argument(args, kwargs, 0, "parents")[0])


def _check_mutation(result, args: tuple, kwargs: dict) -> str | None:
    """What is wrong with a mutation's child ``result`` (compared with the parent), or None."""
    return _check_child(result, argument(args, kwargs, 0, "parent"))


def _check_child(result, reference: Mapping) -> str | None:
    """What is wrong with a child ``result``, or None; its modules and shapes are compared with
    ``reference``'s, an adapter {module: (A, B)}."""
    if not isinstance(result, Mapping):
        return f"returned a {type(result).__name__}, not an adapter"
    if set(result) != set(reference):
        missing, extra = sorted(set(reference) - set(result)), sorted(set(result) - set(reference))
        return f"returned other modules (missing {missing[:3]}, extra {extra[:3]})"
    for name, factors in result.items():
        if not (
            isinstance(factors, (tuple, list))
            and len(factors) == 2
            and all(isinstance(f, torch.Tensor) for f in factors)
        ):
            return f"returned {type(factors).__name__} for module {name!r}, not a pair of tensors (A, B)"
        shapes = tuple(tuple(f.shape) for f in factors)
        expected = tuple(tuple(f.shape) for f in reference[name])
        if shapes != expected:
            return f"returned shapes A {shapes[0]}, B {shapes[1]} for module {name!r}, not {expected[0]}, {expected[1]}"
        if not all(bool(torch.isfinite(f).all()) for f in factors):
            return f"returned non-finite values (NaN or inf) in module {name!r}"
    return None


CHECKS = {"selection": _check_selection, "crossover": _check_crossover, "mutation": _check_mutation}
"""Each kind -> the check of a user's operator's result (:data:`evolora.user_code.Check`)."""
