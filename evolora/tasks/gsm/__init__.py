"""The ``gsm`` task: grade-school math word problems with program-verified answers
(:mod:`evolora.tasks.gsm.task`), and its settings (:mod:`evolora.tasks.gsm.params`)."""

from __future__ import annotations

from evolora.tasks.gsm.params import GSMParams
from evolora.tasks.gsm.task import GSMTask

__all__ = ["GSMParams", "GSMTask"]
