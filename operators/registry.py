"""Name → operator registry, so YAML configs can name operators and have every name and
parameter checked when the config loads (before any model loads).

    from evolora.operators import REGISTRY
    REGISTRY.names("mutation")                                   # ['component_mask', 'gaussian', ...]
    params = REGISTRY.validate("mutation", "lowrank_gaussian", {"sigma": 0.05})
    child = REGISTRY.get("mutation", "lowrank_gaussian").fn(parent, generator=g, **params)
    spec = REGISTRY.resolve_callable("mutation", "my_pkg.ops:my_mutation")   # user function

Kinds and the call signature of each (``fn``):

    selection:   fn(fitness: Tensor (P,), num: int, *, generator, [cases: Tensor (P, N) | None,] **params)
                 -> LongTensor (num,)
    replacement: fn(fitness: Tensor (P,), *, generator, **params) -> (replace_idx, parent_idx)
    crossover:   fn(parents: Sequence[Adapter], fitness: Sequence[float], *, generator, **params) -> Adapter
    mutation:    fn(parent: Adapter, *, generator, **params) -> Adapter
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

from evolora.registry import Registry as Names
from evolora.registry import load_target, summary, target_of
from evolora.spelling import did_you_mean

__all__ = ["KINDS", "Param", "OperatorSpec", "Registry", "REGISTRY", "register", "DescribeRow"]

KINDS = ("selection", "replacement", "crossover", "mutation")
CASES = "cases"
"""A selection operator's optional keyword for per-case scores (P, N), passed by the outer loop when
the function takes it (e.g. an exam's member × problem outcomes, :func:`evolora.operators.lexicase`)."""
_RESERVED = {"generator", "parents", "parent", "fitness", "num", CASES}


@dataclass(frozen=True)
class Param:
    """One operator hyperparameter.

    Args:
        default: value used when the config omits it (its type fixes the accepted type: int, float,
            str, bool; None means "optional", accepting None or a number in range).
        low, high: inclusive numeric bounds (None: unbounded).
        choices: allowed values for categorical parameters.
        doc: one line with units and meaning.
        value_type: the accepted type when it cannot be read off ``default`` (default None → float).
    """

    default: Any = None
    low: float | None = None
    high: float | None = None
    choices: tuple[Any, ...] | None = None
    doc: str = ""
    value_type: type | None = None

    def _type(self) -> type:
        if self.value_type is not None:
            return self.value_type
        return float if self.default is None else type(self.default)

    def allowed(self) -> str:
        """Human-readable allowed values, e.g. "float in [0, 1]" or "one of 'equal', 'fitness'"."""
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        kind = self._type().__name__ + (" or None" if self.default is None else "")
        if self.low is None and self.high is None:
            return f"any {kind}"
        low = "-inf" if self.low is None else f"{self.low:g}"
        high = "inf" if self.high is None else f"{self.high:g}"
        return f"{kind} in [{low}, {high}]"

    def check(self, value: Any) -> Any:
        """Return ``value`` coerced to the parameter's type, or raise ValueError saying what is allowed."""
        if self.choices is not None:
            if value not in self.choices:
                raise ValueError(f"{value!r} is not allowed; {self.allowed()}")
            return value
        if value is None:
            if self.default is None:
                return None
            raise ValueError(f"None is not allowed; {self.allowed()}")
        expected = self._type()
        if expected is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{value!r} is not a bool; {self.allowed()}")
            return value
        if expected in (int, float):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{value!r} is not a number; {self.allowed()}")
            if expected is int and not float(value).is_integer():
                raise ValueError(f"{value!r} is not an integer; {self.allowed()}")
            if (
                math.isnan(float(value))
                or (self.low is not None and value < self.low)
                or (self.high is not None and value > self.high)
            ):
                raise ValueError(f"{value!r} is out of range; {self.allowed()}")
            return int(value) if expected is int else float(value)
        if not isinstance(value, expected):
            raise ValueError(f"{value!r} is not a {expected.__name__}; {self.allowed()}")
        return value


@dataclass(frozen=True)
class OperatorSpec:
    """A registered operator: its kind, YAML name, function, hyperparameters and summary."""

    name: str
    kind: str
    fn: Callable[..., Any]
    params: Mapping[str, Param] = field(default_factory=dict)
    doc: str = ""
    takes_cases: bool = False
    """A selection operator whose function has a ``cases`` keyword: the outer loop passes the role's
    per-case scores (P, N), or None when the fitness has none (:data:`CASES`)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def select(self, fitness: Any, num: int, *, generator: Any, cases: Any = None, **params: Any) -> Any:
        """Call a selection operator: ``cases`` (P, N) go to it only when it takes them (:data:`CASES`)."""
        extra = {CASES: cases} if self.takes_cases else {}
        return self.fn(fitness, num, generator=generator, **extra, **params)


class DescribeRow(NamedTuple):
    kind: str
    name: str
    params: str
    doc: str


def _signature_params(fn: Callable[..., Any]) -> dict[str, Param]:
    """Unbounded Params from a function's keyword-only arguments with defaults (``generator`` excluded)."""
    params = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in _RESERVED:
            if p.default is inspect.Parameter.empty:
                raise ValueError(
                    f"{fn.__qualname__}: keyword-only argument {p.name!r} needs a default to be a "
                    f"configurable operator parameter"
                )
            params[p.name] = Param(default=p.default)
    return params


def _spec(
    kind: str, name: str, fn: Callable[..., Any], params: Mapping[str, Param] | None = None, doc: str | None = None
) -> OperatorSpec:
    """The spec of ``fn`` as operator ``name`` of ``kind`` (see :meth:`Registry.register`).

    Raises:
        ValueError: params that do not match fn's signature, or a default outside its own range.
    """
    from_signature = _signature_params(fn)
    if params is None:
        params = from_signature
    elif set(params) != set(from_signature):
        raise ValueError(
            f"{kind} {name!r}: declared params {sorted(params)} differ from {fn.__qualname__}'s "
            f"keyword-only args {sorted(from_signature)}"
        )
    for param in params.values():
        if param.default is not None or param.choices is not None:
            param.check(param.default)
    takes_cases = CASES in inspect.signature(fn).parameters
    return OperatorSpec(
        name=name, kind=kind, fn=fn, params=dict(params), doc=doc or summary(fn), takes_cases=takes_cases
    )


class Registry:
    """Operators by (kind, name): one :class:`evolora.registry.Registry` of each kind. Duplicate names
    raise; lookups and validation name what is allowed."""

    def __init__(self) -> None:
        self._specs: dict[str, dict[str, OperatorSpec]] = {kind: {} for kind in KINDS}

    def _kind(self, kind: str) -> Names[OperatorSpec]:
        """The operators of ``kind`` (a ``package.module:function`` imported on first use): a view over
        its dict in ``_specs``, which holds the state."""
        if kind not in self._specs:
            raise ValueError(f"unknown operator kind {kind!r}; allowed: {', '.join(KINDS)}")
        return Names(
            kind, entries=self._specs[kind], origin=lambda spec: target_of(spec.fn), build=partial(self._load, kind)
        )

    def register(
        self,
        kind: str,
        name: str,
        fn: Callable[..., Any],
        params: Mapping[str, Param] | None = None,
        doc: str | None = None,
    ) -> OperatorSpec:
        """Register ``fn`` as operator ``name`` of ``kind`` and return its spec.

        Args:
            params: hyperparameters; default: read from fn's keyword-only args (unbounded). Given
                explicitly, their names must equal fn's keyword-only args (besides ``generator``).
            doc: summary; default: the first line of fn's docstring.

        Raises:
            ValueError: unknown kind, an empty name, one holding ':' or a duplicate, or params that
                do not match fn's signature.
        """
        names = self._kind(kind)
        names.check_new(name)
        return names.register(name, _spec(kind, name, fn, params, doc))

    def decorator(self, kind: str, name: str | None = None, **params: Param) -> Callable[[Callable], Callable]:
        """Decorator form of :meth:`register`; returns the function unchanged. Name defaults to fn.__name__."""

        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.register(kind, name or fn.__name__, fn, params or None)
            return fn

        return wrap

    def get(self, kind: str, name: str) -> OperatorSpec:
        """Spec of ``name``, or of a ``"package.module:function"`` (:meth:`resolve_callable`).

        Raises:
            ValueError: an unknown kind or name (the message lists the registered names of ``kind``),
                or a target that does not load.
        """
        return self._kind(kind).get(name)

    def names(self, kind: str, *, resolved: bool = True) -> list[str]:
        """Registered names of ``kind``, sorted; with ``resolved=False`` without the
        ``"package.module:function"`` names that :meth:`resolve_callable` added at run time."""
        return self._kind(kind).names(loaded=resolved)

    def validate(self, kind: str, name: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Check a config's parameters for operator ``name`` and return them with defaults filled in.

        A name containing ':' is resolved with :meth:`resolve_callable` first.

        Raises:
            ValueError: unknown kind/name, unknown parameter (message lists the allowed names), or a
                value of the wrong type or out of range (message gives the range or choices).
        """
        spec = self._kind(kind).get(name)
        params = dict(params or {})
        unknown = sorted(set(params) - set(spec.params))
        if unknown:
            allowed = ", ".join(spec.params) or "(none)"
            raise ValueError(
                f"{kind} {name!r}: unknown parameter {unknown[0]!r}; {did_you_mean(unknown[0], spec.params)}allowed: {allowed}"
            )
        out = {}
        for pname, param in spec.params.items():
            if pname not in params:
                out[pname] = param.default
                continue
            try:
                out[pname] = param.check(params[pname])
            except ValueError as err:
                raise ValueError(f"{kind} {name!r}: parameter {pname!r}: {err}") from None
        return out

    def resolve_callable(self, kind: str, target: str) -> OperatorSpec:
        """Import ``"package.module:function"`` and register it (once) under that string.

        Its parameters are the function's keyword-only arguments with defaults (unbounded), or the
        declared ones (bounds, choices, docs) when the module registered the function itself on
        import (``@register(kind, epsilon=Param(0.2, low=0, high=1))``). Calling twice with the
        same target returns the same spec.

        Raises:
            ValueError: malformed target, module or attribute not found, not callable.
        """
        return self._kind(kind).get(target)

    def _load(self, kind: str, target: str) -> OperatorSpec:
        """The spec of a user's ``package.module:function`` (imported now), as its module declared it if it did."""
        fn = load_target(target, f"{kind} {target!r}")
        declared = next((spec for spec in self._specs[kind].values() if spec.fn is fn), None)  # registered on import
        if declared is not None:
            return _spec(kind, target, fn, declared.params, declared.doc)
        return _spec(kind, target, fn)

    def describe(self, kind: str | None = None) -> list[DescribeRow]:
        """Rows (kind, name, "param=default [range]; …", first doc line) for a CLI listing."""
        rows = []
        for k in [kind] if kind else KINDS:
            for name in self.names(k):
                spec = self._specs[k][name]
                params = "; ".join(f"{p}={v.default!r} ({v.allowed()})" for p, v in spec.params.items())
                rows.append(DescribeRow(k, name, params, spec.doc))
        return rows


REGISTRY = Registry()
"""The package-wide registry; the built-in operators register themselves on import."""


def register(kind: str, name: str | None = None, **params: Param) -> Callable[[Callable], Callable]:
    """Decorator registering into :data:`REGISTRY`: ``@register("mutation", sigma=Param(0.1, 0, 10))``."""
    return REGISTRY.decorator(kind, name, **params)
