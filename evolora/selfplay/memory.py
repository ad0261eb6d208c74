"""The run's memory of proposed problems: repetition across steps, and one truth per question.

    memory = ProblemMemory(window=10)
    memory.recent(key, step)            # proposed within the last `window` steps -> repetition penalty
    memory.conflicts(key, answer)       # valid before with another answer -> invalid this time
    memory.record(step, games)          # after the step

Within one step, R-Zero's clustered penalty (:func:`evolora.selfplay.repetition_penalties`)
already applies; this memory carries it across steps, so a teacher cannot earn by proposing the
bat-and-ball question every step, and a question that was valid with one answer cannot later be
valid with another (its program then contradicts an earlier one: at most one can be right).
Keys are :func:`evolora.tasks.base.normalise_problem` of the problem text. The state is part
of the run's checkpoint. Source: R-Zero (arXiv 2508.05004) §3 (repetition penalty); the
cross-step window and the answer check are evolora's own.
"""

from __future__ import annotations

import math
from typing import Any, Iterable


class ProblemMemory:
    """Normalised problems proposed in the last ``window`` steps, and the first answer of each valid one.

    Args:
        window: steps a proposal is remembered for the repetition penalty (>= 0; 0 keeps the
            penalty within the step, as without a memory). Answers are remembered for the whole run.
    """

    def __init__(self, window: int) -> None:
        if window < 0:
            raise ValueError(f"window must be >= 0 steps, got {window}")
        self.window = window
        self.last_step: dict[str, int] = {}
        self.answers: dict[str, Any] = {}

    def recent(self, key: str | None, step: int) -> bool:
        """Whether ``key`` was proposed in one of the ``window`` steps before ``step``."""
        seen = self.last_step.get(key) if key is not None else None
        return seen is not None and 0 < step - seen <= self.window

    def conflicts(self, key: str | None, answer: Any) -> bool:
        """Whether ``key`` was valid earlier in the run with an answer other than ``answer``."""
        if key is None or key not in self.answers:
            return False
        return not same_answer(self.answers[key], answer)

    def record(self, step: int, entries: Iterable[tuple[str | None, bool, Any]]) -> None:
        """Remember one step's proposals: (key, valid, answer) each; a valid key keeps its first answer."""
        for key, valid, answer in entries:
            if key is None:
                continue
            self.last_step[key] = step
            if valid:
                self.answers.setdefault(key, answer)
        horizon = step - self.window
        self.last_step = {k: s for k, s in self.last_step.items() if s > horizon}

    def state_dict(self) -> dict:
        """JSON-serialisable state (for the run's checkpoint)."""
        return {"window": self.window, "last_step": dict(self.last_step), "answers": dict(self.answers)}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` output (the window stays the configured one)."""
        self.last_step = {k: int(v) for k, v in state["last_step"].items()}
        self.answers = dict(state["answers"])


def same_answer(a: Any, b: Any) -> bool:
    """Equal answers: numbers within 1e-9 relative (or 1e-12 absolute), anything else by ``==``.

    >>> same_answer(0.05, 0.05 + 1e-15), same_answer(10.1, 0.05), same_answer({"x": 1}, {"x": 1})
    (True, False, True)
    """
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b
