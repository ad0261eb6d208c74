"""Task settings as frozen dataclasses: a task is built from one params object (``ArithTask(params)``)
or from its fields by name (``ArithTask(eval_seed=1)``, what ``task.params`` in YAML does), and
every name is checked against the dataclass's fields before anything is built."""

from __future__ import annotations

import dataclasses
import inspect
from typing import TypeVar

from evolora.spelling import did_you_mean

P = TypeVar("P")


def check_known(task: str, settings, accepted: list[str]) -> None:
    """Refuse a setting of task ``task`` whose name is not in ``accepted`` (ValueError naming its close
    match and the accepted names)."""
    unknown = sorted(set(settings) - set(accepted))
    if unknown:
        raise ValueError(
            f"task {task!r} does not accept parameter(s) {unknown}; {did_you_mean(unknown[0], accepted)}accepted: {accepted}"
        )


def task_params(params_type: type[P], params: P | None, settings: dict, task: str) -> P:
    """The frozen settings of a task: ``params`` (None: the defaults of ``params_type``) with
    ``settings`` replacing fields by name.

    Args:
        params_type: the task's frozen settings dataclass (e.g. :class:`evolora.tasks.arith.ArithParams`).
        params: an instance of ``params_type``, or None.
        settings: field name → value; each name must be a field of ``params_type``.
        task: the task's registered name, for the messages.

    Raises:
        ValueError: a name that is no field (the message lists the accepted ones), or a value the
            dataclass refuses.
        TypeError: ``params`` is not a ``params_type``.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Params:
    ...     size: int = 1
    >>> task_params(Params, None, {"size": 2}, "toy"), task_params(Params, Params(3), {}, "toy")
    (Params(size=2), Params(size=3))
    """
    check_known(task, settings, [field.name for field in dataclasses.fields(params_type)])
    if params is None:
        return params_type(**settings)
    if not isinstance(params, params_type):
        raise TypeError(f"task {task!r} takes a {params_type.__name__}, not {type(params).__name__}")
    return dataclasses.replace(params, **settings) if settings else params


def params_signature(factory) -> inspect.Signature:
    """The parameters a task factory takes by name (``task.params``).

    A factory whose signature ends in ``**settings`` and that has a settings dataclass
    (``factory.params_type``, see :attr:`evolora.tasks.base.Task.params_type`) takes that one's
    fields, after its own named parameters (a subclass of a built-in task may add some); any other
    factory takes what its signature names.

    Raises:
        TypeError, ValueError: the factory has no signature :mod:`inspect` can read.
    """
    signature = inspect.signature(factory)
    params_type = getattr(factory, "params_type", None)
    named = [p for p in signature.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not dataclasses.is_dataclass(params_type) or all(p.kind != p.VAR_KEYWORD for p in signature.parameters.values()):
        return signature
    taken = {p.name for p in named}
    fields = [
        p.replace(kind=p.KEYWORD_ONLY)
        for p in inspect.signature(params_type).parameters.values()
        if p.name not in taken
    ]
    return signature.replace(parameters=[p.replace(kind=p.KEYWORD_ONLY) for p in named] + fields)
