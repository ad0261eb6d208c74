"""A toy game any model can play, for smoke runs, tests and benchmarks (task name "toy").

Any non-empty proposal is a valid problem whose answer is its length mod 10; a student is
correct when its final number equals it. Nothing is sandboxed because nothing is run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from evolora.tasks.base import Grade, HeldOutItem, Message, Proposal, Task, Verdict
from evolora.tasks.numeric import final_number
from evolora.tasks.params import task_params


@dataclass(frozen=True)
class ToyParams:
    """The settings of the ``toy`` task (``task.params`` in YAML), checked when built.

    Args:
        max_problem_chars: characters of a proposal shown to the students (>= 1); longer ones are cut.

    Raises:
        ValueError: ``max_problem_chars`` is not a whole number >= 1.
    """

    max_problem_chars: int = 200

    def __post_init__(self) -> None:
        value = self.max_problem_chars
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"toy task: need max_problem_chars >= 1 (got {value!r})")


class ToyTask(Task):
    """Always-valid proposals, numeric answers: exercises every phase of a step cheaply.

    Settings: :class:`ToyParams` (``task.params`` in YAML).
    """

    name = "toy"
    params_type = ToyParams
    held_out_source = "toy questions q0, q1, ... (answer: the index mod 10)"
    proposal_prefix = ""
    complexity_kind = "expression"

    def __init__(self, params: ToyParams | None = None, /, **settings) -> None:
        """``params`` (None: the defaults), with ``settings`` replacing its fields by name.

        Raises:
            ValueError: a setting that is no field of :class:`ToyParams`, or a value out of its range.
        """
        self.params = task_params(ToyParams, params, settings, self.name)
        self.max_problem_chars = self.params.max_problem_chars

    def proposal_prompt(self, rng: random.Random) -> list[Message]:
        return [
            {"role": "user", "content": f"Write a one-line arithmetic question about the number {rng.randint(0, 9)}."}
        ]

    def parse_proposal(self, text: str) -> Proposal | None:
        return Proposal(problem=text, program="", raw=text) if text.strip() else None

    def verify(self, proposals: list[Proposal | None]) -> list[Verdict]:
        return [
            Verdict(True, float(len(p.problem) % 10), "ok") if p else Verdict(False, None, "parse") for p in proposals
        ]

    def solve_prompt(self, problem: str) -> list[Message]:
        return [{"role": "user", "content": problem[: self.max_problem_chars]}]

    def grade(self, completion: str, answer: float) -> Grade:
        value = final_number(completion)
        if value is None:
            return Grade("format", None)
        return Grade("correct" if value == answer else "wrong", value)

    def held_out(self, limit: int, rng: random.Random) -> list[HeldOutItem]:
        return [HeldOutItem(f"q{i}", float(i % 10)) for i in range(limit)]
