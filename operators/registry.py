"""Name → operator registry, so YAML configs can name operators and have every name and
parameter checked when the config loads (before any model loads).

    from evolora.operators import REGISTRY
    REGISTRY.names("mutation")                                   # ['component_mask', 'gaussian', ...]
    params = REGISTRY.validate("mutation", "lowrank_gaussian", {"sigma": 0.05})
    child = REGISTRY.get("mutation", "lowrank_gaussian").fn(parent, generator=g, **params)
    spec = REGISTRY.resolve_callable("mutation", "my_pkg.ops:my_mutation")   # user function

Kinds and the call signature of each (``fn``):

    selection:   fn(fitness: Tensor (P,), num: int, *, generator, **params) -> LongTensor (num,)
    replacement: fn(fitness: Tensor (P,), *, generator, **params) -> (replace_idx, parent_idx)
    crossover:   fn(parents: Sequence[Adapter], fitness: Sequence[float], *, generator, **params) -> Adapter
    mutation:    fn(parent: Adapter, *, generator, **params) -> Adapter
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["KINDS", "Param", "OperatorSpec", "Registry", "REGISTRY", "register", "DescribeRow"]

KINDS = ("selection", "replacement", "crossover", "mutation")
_RESERVED = {"generator", "parents", "parent", "fitness", "num"}


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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)


class DescribeRow(NamedTuple):
    kind: str
    name: str
    params: str
    doc: str


def _first_line(text: str | None) -> str:
    return (inspect.cleandoc(text).splitlines() or [""])[0] if text else ""


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


class Registry:
    """Operators by (kind, name). Duplicate names raise; lookups and validation name what is allowed."""

    def __init__(self) -> None:
        self._specs: dict[str, dict[str, OperatorSpec]] = {kind: {} for kind in KINDS}

    def _kind(self, kind: str) -> dict[str, OperatorSpec]:
        if kind not in self._specs:
            raise ValueError(f"unknown operator kind {kind!r}; allowed: {', '.join(KINDS)}")
        return self._specs[kind]

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
            ValueError: unknown kind, duplicate name, or params that do not match fn's signature.
        """
        specs = self._kind(kind)
        if name in specs:
            raise ValueError(
                f"{kind} {name!r} is already registered (by {specs[name].fn.__module__}."
                f"{specs[name].fn.__qualname__}); pick another name"
            )
        from_signature = _signature_params(fn)
        if params is None:
            params = from_signature
        elif set(params) != set(from_signature):
            raise ValueError(
                f"{kind} {name!r}: declared params {sorted(params)} differ from {fn.__qualname__}'s "
                f"keyword-only args {sorted(from_signature)}"
            )
        for pname, param in params.items():
            if param.default is not None or param.choices is not None:
                param.check(param.default)
        spec = OperatorSpec(name=name, kind=kind, fn=fn, params=dict(params), doc=doc or _first_line(fn.__doc__))
        specs[name] = spec
        return spec

    def decorator(self, kind: str, name: str | None = None, **params: Param) -> Callable[[Callable], Callable]:
        """Decorator form of :meth:`register`; returns the function unchanged. Name defaults to fn.__name__."""

        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.register(kind, name or fn.__name__, fn, params or None)
            return fn

        return wrap

    def get(self, kind: str, name: str) -> OperatorSpec:
        """Spec of ``name``; raises ValueError listing the registered names of ``kind``."""
        specs = self._kind(kind)
        if name not in specs:
            raise ValueError(
                f"unknown {kind} {name!r}; registered: {', '.join(sorted(specs))} "
                f"(or 'package.module:function' for your own)"
            )
        return specs[name]

    def names(self, kind: str, *, resolved: bool = True) -> list[str]:
        """Registered names of ``kind``, sorted; with ``resolved=False`` without the
        ``"package.module:function"`` names that :meth:`resolve_callable` added at run time."""
        return sorted(n for n in self._kind(kind) if resolved or ":" not in n)

    def validate(self, kind: str, name: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Check a config's parameters for operator ``name`` and return them with defaults filled in.

        A name containing ':' is resolved with :meth:`resolve_callable` first.

        Raises:
            ValueError: unknown kind/name, unknown parameter (message lists the allowed names), or a
                value of the wrong type or out of range (message gives the range or choices).
        """
        spec = (
            self.resolve_callable(kind, name) if ":" in name and name not in self._kind(kind) else self.get(kind, name)
        )
        params = dict(params or {})
        unknown = sorted(set(params) - set(spec.params))
        if unknown:
            allowed = ", ".join(spec.params) or "(none)"
            raise ValueError(f"{kind} {name!r}: unknown parameter {unknown[0]!r}; allowed: {allowed}")
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
        specs = self._kind(kind)
        if target in specs:
            return specs[target]
        module_name, sep, attr = target.partition(":")
        if not sep or not module_name or not attr:
            raise ValueError(f"{target!r} is not of the form 'package.module:function'")
        try:
            module = importlib.import_module(module_name)
        except ImportError as err:
            raise ValueError(
                f"cannot import module {module_name!r} for {kind} {target!r}: {err}; put the folder "
                f"that holds it on the import path (e.g. PYTHONPATH=.)"
            ) from err
        fn = module
        for part in attr.split("."):
            if not hasattr(fn, part):
                raise ValueError(f"module {module_name!r} has no attribute {attr!r} (for {kind} {target!r})")
            fn = getattr(fn, part)
        if not callable(fn):
            raise ValueError(f"{target!r} is not callable")
        declared = next((spec for spec in specs.values() if spec.fn is fn), None)  # registered on import
        if declared is not None:
            return self.register(kind, target, fn, declared.params, declared.doc)
        return self.register(kind, target, fn)

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
