"""A user's own task, named in YAML as ``task.name: package.module:factory``, failing with its name.

:func:`load_factory` imports the factory (a :class:`~evolora.tasks.base.Task` subclass or a function
returning one) when the config loads. :func:`guard_task` wraps a task it built: an exception from
one of the six methods every task defines, or a result that breaks :data:`CONTRACT` (a prompt that
is not a list of ``{"role", "content"}`` messages, a proposal that is not a Proposal or None, not one
Verdict per proposal, a grade that is not a Grade, held-out items that are not a list of
HeldOutItem or None) becomes a :class:`evolora.user_code.UserCodeError` naming ``task.name``, the
task, the method and the contract. The command line prints it in at most 3 lines (``--verbose`` adds
the traceback); the run's last checkpoint is intact, so it resumes once the task is fixed.
"""

from __future__ import annotations

from collections.abc import Callable

from evolora.registry import load_target
from evolora.tasks.base import Grade, HeldOutItem, Proposal, Task, Verdict
from evolora.user_code import UserCode, argument

KEY = "task.name"
"""The config key that names a task."""

CONTRACT = (
    "factory(**task.params) returns an evolora.tasks.base.Task; proposal_prompt/solve_prompt -> "
    "[{role, content}] messages, parse_proposal -> Proposal or None, verify -> one Verdict per proposal, "
    "grade -> Grade, held_out -> [HeldOutItem] or None"
)
"""What a user's task takes and returns (:class:`evolora.tasks.base.Task`)."""


def load_factory(name: str) -> Callable:
    """The callable ``package.module:factory`` names (the current folder first on the import path).

    Raises:
        ValueError: ``name`` is not of that form, its module does not import, or it lacks the attribute
            or is not callable (the message names ``task.name`` and what to fix).
    """
    import os
    import sys

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return load_target(name, f"{KEY} {name!r}", "factory")


def build_task(factory: Callable, name: str, params: dict) -> Task:
    """``factory(**params)``, guarded (:func:`guard_task`).

    Raises:
        evolora.user_code.UserCodeError: the factory raised, or returned something other than a :class:`Task`.
    """
    code = UserCode(KEY, name, CONTRACT)
    with code.call(when="while it was built"):
        task = factory(**params)
    if not isinstance(task, Task):
        raise code.error("", f"returned a {type(task).__name__}, not a Task")
    return guard_task(task, name)


def guard_task(task: Task, name: str) -> Task:
    """``task`` with its six contract methods wrapped on the instance (its class stays the user's):
    an exception or a result that breaks :data:`CONTRACT` raises
    :class:`~evolora.user_code.UserCodeError` naming ``task.name``, ``name`` and the method."""
    code = UserCode(KEY, name, CONTRACT)
    for method, check in CHECKS.items():
        setattr(task, method, code.guard(getattr(task, method), method, check))
    return task


def _messages(result, args, kwargs) -> str | None:
    if not isinstance(result, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in result
    ):
        return f"returned {type(result).__name__} {str(result)[:60]!r}, not a list of {{role, content}} messages"
    return None


def _proposal(result, args, kwargs) -> str | None:
    return (
        None
        if result is None or isinstance(result, Proposal)
        else f"returned a {type(result).__name__}, not a Proposal or None"
    )


def _verdicts(result, args, kwargs) -> str | None:
    proposals = argument(args, kwargs, 0, "proposals") or []
    if not isinstance(result, list) or not all(isinstance(v, Verdict) for v in result):
        return f"returned a {type(result).__name__}, not a list of Verdict"
    return None if len(result) == len(proposals) else f"returned {len(result)} verdicts for {len(proposals)} proposals"


def _grade(result, args, kwargs) -> str | None:
    return None if isinstance(result, Grade) else f"returned a {type(result).__name__}, not a Grade"


def _held_out(result, args, kwargs) -> str | None:
    if result is None or (isinstance(result, list) and all(isinstance(item, HeldOutItem) for item in result)):
        return None
    return f"returned a {type(result).__name__}, not a list of HeldOutItem or None"


CHECKS: dict[str, Callable] = {
    "proposal_prompt": _messages,
    "parse_proposal": _proposal,
    "verify": _verdicts,
    "solve_prompt": _messages,
    "grade": _grade,
    "held_out": _held_out,
}
"""Each contract method of a task -> the check of its result."""
