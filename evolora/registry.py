"""Names → entries of one kind, and a user's own code named ``package.module:attr``.

Every kind of code a config may name is looked up in one :class:`Registry`: the plays
(:data:`evolora.plays.PLAYS`), the rollout engines (:data:`evolora.generation.registry.ENGINES`), the
operators of each kind (:data:`evolora.operators.REGISTRY`) and the tasks
(:data:`evolora.tasks.TASKS`)::

    plays = Registry("play", form="function", build=user_play)
    plays.register("selfplay", spec)        # a second "selfplay" raises, naming the first
    plays.get("selfplay")                   # an unknown name raises, listing the registered ones
    plays.get("my_pkg.plays:judge")         # built by user_play on first use, kept under that string
    plays.names()                           # sorted

:func:`load_target` imports what a ``package.module:attr`` string names; its errors name the module
or the attribute that is missing, and any exception the module raises while it runs. Nothing here
imports the rest of the package (``operators/`` builds on it, and a config is checked with it before
any model loads).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from evolora.spelling import did_you_mean
from evolora.user_code import describe_exception

T = TypeVar("T")
F = TypeVar("F")

IMPORT_HINT = "put the folder that holds it on the import path (e.g. PYTHONPATH=.)"
"""What to do when a user's module does not import."""


def load_target(target: str, label: str, form: str = "function") -> Callable[..., Any]:
    """The callable ``package.module:attr`` names (``attr`` may be dotted: ``Class.method``), imported now.

    Args:
        target: e.g. ``"my_pkg.plays:judge"``.
        label: what each error names first, e.g. ``"play 'my_pkg.plays:judge'"``.
        form: what ``attr`` should be, for the messages: ``function``, ``Class`` or ``factory``.

    Raises:
        ValueError: ``target`` is not of that form; its module does not import (the message names
            the module and the exception it raised: ImportError or the module's own while it runs);
            the module has no such attribute; or it is not callable.
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{label}: {target!r} is not of the form 'package.module:{form}'")
    try:
        found = importlib.import_module(module_name)
    except Exception as error:  # ImportError, or the module's own error while it runs
        raise ValueError(
            f"{label}: cannot import module {module_name!r} ({describe_exception(error)}); {IMPORT_HINT}"
        ) from error
    for part in attr.split("."):
        if not hasattr(found, part):
            raise ValueError(f"{label}: module {module_name!r} has no attribute {attr!r}")
        found = getattr(found, part)
    if not callable(found):
        raise ValueError(f"{label}: {attr!r} of module {module_name!r} is not callable; name a {form}")
    return found


def target_of(obj: Any) -> str:
    """``obj``'s ``package.module:qualname`` (a function or class), as :func:`load_target` reads it."""
    return f"{obj.__module__}:{obj.__qualname__}"


def summary(obj: Any) -> str:
    """The first line of ``obj``'s docstring ("" without one)."""
    return ((getattr(obj, "__doc__", None) or "").strip().splitlines() or [""])[0]


class Registry(Generic[T]):
    """Names → entries of one kind; a name holding ``:`` is a user's ``package.module:attr``.

    Args:
        kind: what an entry is, as the messages name it: ``play``, ``generation.engine``, ``mutation``, ``task``.
        form: what a user's ``package.module:attr`` names, for the messages: ``function``, ``Class``, ``factory``.
        entries: the dict that holds the entries (a module's public one, e.g. ``PLAYS``); default a new one.
        reserved: names that mean something else and cannot be registered (``auto`` for engines).
        origin: an entry → where it comes from, for the duplicate message; default :func:`target_of`.
        build: a user's ``package.module:attr`` → its entry (importing it, e.g. with :func:`load_target`);
            None: only registered names are known.
    """

    def __init__(
        self,
        kind: str,
        *,
        form: str = "function",
        entries: dict[str, T] | None = None,
        reserved: tuple[str, ...] = (),
        origin: Callable[[T], str] = target_of,
        build: Callable[[str], T] | None = None,
    ) -> None:
        self.kind, self.form, self.reserved = kind, form, reserved
        self.entries: dict[str, T] = {} if entries is None else entries
        self.origin, self.build = origin, build

    def check_new(self, name: str) -> None:
        """Refuse ``name`` for :meth:`register` before anything is built.

        Raises:
            ValueError: ``name`` is empty, reserved or holds ``:``, or it is already registered (the
                message names the entry's origin).
        """
        if not name or name in self.reserved or ":" in name:
            reserved = "".join(f", not {word!r}" for word in self.reserved)
            raise ValueError(f"a {self.kind} name must be non-empty{reserved} and hold no ':', got {name!r}")
        if name in self.entries:
            raise ValueError(
                f"{self.kind} {name!r} is already registered ({self.origin(self.entries[name])}); pick another name"
            )

    def register(self, name: str, entry: T) -> T:
        """Add ``entry`` under ``name`` and return it.

        Raises:
            ValueError: as :meth:`check_new`.
        """
        self.check_new(name)
        self.entries[name] = entry
        return entry

    def register_target(
        self, name: str, target: str | None, doc: str, make: Callable[[str, str], T]
    ) -> Callable[[F], F]:
        """Register ``make(target, doc)`` under ``name`` now, for code imported on first use; with no
        ``target``, return a decorator that registers ``make(target_of(obj), doc or summary(obj))``
        for the function or class it decorates (and returns it unchanged).

        Raises:
            ValueError: as :meth:`check_new`, at once (before the decorator is applied).
        """
        self.check_new(name)
        if target is not None:
            self.register(name, make(target, doc))
            return lambda obj: obj

        def add(obj: F) -> F:
            self.register(name, make(target_of(obj), doc or summary(obj)))
            return obj

        return add

    def get(self, name: str) -> T:
        """The entry of a registered ``name``, or of a user's ``package.module:attr`` (built by
        ``build`` and kept under that string on first use).

        Raises:
            ValueError: an unknown name (the message lists the registered ones, and the
                ``package.module:attr`` form where ``build`` is given), or what ``build`` raises for a
                target that does not load.
        """
        if name in self.entries:
            return self.entries[name]
        if ":" in name and self.build is not None:
            entry = self.build(name)
            self.entries[name] = entry
            return entry
        listing = ", ".join(self.names())
        choices = f"use {', '.join(self.reserved)}, one of {listing}" if self.reserved else f"registered: {listing}"
        own = f" (or 'package.module:{self.form}' for your own)" if self.build is not None else ""
        raise ValueError(f"unknown {self.kind} {name!r}; {did_you_mean(name, self.names())}{choices}{own}")

    def names(self, *, loaded: bool = True) -> list[str]:
        """The registered names, sorted; with ``loaded=False`` without the ``package.module:attr``
        names that :meth:`get` added on first use."""
        return sorted(name for name in self.entries if loaded or ":" not in name)

    def __contains__(self, name: object) -> bool:
        return name in self.entries
