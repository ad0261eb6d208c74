"""The ``arith`` task: arithmetic expressions, verified exactly without ``eval``
(:mod:`evolora.tasks.arith.task`), and its settings (:mod:`evolora.tasks.arith.params`)."""

from __future__ import annotations

from evolora.tasks.arith.params import ArithParams
from evolora.tasks.arith.task import ArithTask

__all__ = ["ArithParams", "ArithTask"]
