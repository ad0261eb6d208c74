"""Tasks: verifiable games between teachers and students, and their registry.

``make_task(name, **params)`` builds a task from YAML (``task: {name: gsm, ...}``);
``register_task(name, factory)`` adds one (duplicate names raise). Registered names are
the keys of ``TASKS``. One package per built-in task (:mod:`evolora.tasks.arith`,
:mod:`evolora.tasks.gsm`, :mod:`evolora.tasks.code`), each with a frozen settings dataclass;
the pieces they share (the :class:`~evolora.tasks.base.Task` protocol, number parsing, the
sandbox pool) sit beside them.
"""

from __future__ import annotations

from evolora.tasks.arith import ArithParams, ArithTask
from evolora.tasks.base import Grade, HeldOutItem, Message, Proposal, Task, Verdict
from evolora.tasks.code import CodeParams, CodeTask
from evolora.tasks.gsm import GSMParams, GSMTask
from evolora.tasks.registry import TASKS, check_task, make_task, register_task
from evolora.tasks.toy import ToyParams, ToyTask

__all__ = [
    "TASKS",
    "ArithParams",
    "ArithTask",
    "CodeParams",
    "CodeTask",
    "GSMParams",
    "GSMTask",
    "ToyParams",
    "ToyTask",
    "Grade",
    "HeldOutItem",
    "Message",
    "Proposal",
    "Task",
    "Verdict",
    "check_task",
    "make_task",
    "register_task",
]
