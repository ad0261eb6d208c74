"""The ``code`` task: Absolute Zero Reasoner's three code games, verified by execution
(:mod:`evolora.tasks.code.task`), and its settings (:mod:`evolora.tasks.code.params`)."""

from __future__ import annotations

from evolora.tasks.code.params import CodeParams
from evolora.tasks.code.task import CodeTask

__all__ = ["CodeParams", "CodeTask"]
