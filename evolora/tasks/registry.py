"""The task registry: ``make_task(name, **params)`` builds a task from YAML (``task: {name: gsm,
...}``); ``register_task(name, factory)`` adds one (duplicate names raise). Registered names are
the keys of ``TASKS``; the built-in tasks (``gsm``, ``arith``, ``code``, ``toy``) are registered here.
"""

from __future__ import annotations

from collections.abc import Callable

from evolora.registry import Registry
from evolora.tasks.arith import ArithTask
from evolora.tasks.base import Task
from evolora.tasks.code import CodeTask
from evolora.tasks.gsm import GSMTask
from evolora.tasks.params import check_known, params_signature
from evolora.tasks.toy import ToyTask
from evolora.tasks.user_task import build_task, load_factory

TASKS: dict[str, Callable[..., Task]] = {}
"""Registered task names → factories ``f(**params) -> Task`` (read-only by convention)."""

_REGISTRY = Registry("task", form="factory", entries=TASKS, build=load_factory)


def register_task(name: str, factory: Callable[..., Task]) -> None:
    """Register ``factory`` under ``name``; raises ValueError when the name is taken."""
    _REGISTRY.register(name, factory)


def make_task(name: str, **params) -> Task:
    """Build a registered task, or a user's own named ``package.module:factory`` (imported and
    registered under that name on first use, and guarded: :mod:`evolora.tasks.user_task`), checking
    parameter names before constructing it.

    Raises:
        ValueError: unknown task name, a ``module:factory`` that does not import, or a parameter the
            task does not accept (the message lists the accepted ones).
        TypeError: the factory did not return a :class:`evolora.tasks.base.Task`.
        evolora.user_code.UserCodeError: a user's ``module:factory`` raised or returned no Task.
    """
    task = _construct(name, params)
    if not isinstance(task, Task):
        raise TypeError(
            f"task {name!r}: its factory returned {type(task).__name__}, not a Task; subclass "
            f"evolora.tasks.base.Task (its six abstract methods, every other hook has a default)"
        )
    return task


def _construct(name: str, params: dict):
    factory = _REGISTRY.get(name)
    try:
        signature = params_signature(factory)
    except (TypeError, ValueError):
        return _call(factory, name, params)
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    accepted = [n for n, p in signature.parameters.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not accepts_any:
        check_known(name, params, accepted)
    return _call(factory, name, params)


def _call(factory, name: str, params: dict):
    """``factory(**params)``; a user's ``module:factory`` through :func:`evolora.tasks.user_task.build_task`
    (an exception or a result that is no Task names it, and the task's methods are guarded)."""
    if ":" in name:
        return build_task(factory, name, params)
    return factory(**params)


def check_task(name: str, params: dict) -> None:
    """Check a task name and its parameters by building it once (config validation, no model).

    Raises:
        ValueError: unknown task, unknown parameter or a value the task rejects.
        FileNotFoundError: a data path the task needs does not exist.
    """
    make_task(name, **params).close()


register_task("gsm", GSMTask)
register_task("arith", ArithTask)
register_task("code", CodeTask)
register_task("toy", ToyTask)
