"""The task interface: a verifiable game between a teacher and a student.

A task is pure data handling plus a verifier: it builds chat prompts, parses what the
models wrote, asks the sandbox whether a proposal is valid (and what its ground truth
is), and grades answers. It never touches a model. Roles are data, not subclasses.

Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-4; Absolute Zero Reasoner (arXiv 2505.03335).
"""

from __future__ import annotations

import random
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

from evolora.generation.types import Segment  # re-exported: a task's structured proposal

Message = dict[str, str]
"""One chat message: {"role": "system" | "user" | "assistant", "content": str}."""

GradeLabel = Literal["correct", "wrong", "format"]

Judgement = Literal["correct", "incorrect"]
"""A critic's parsed verdict on one answer (SPC, arXiv 2504.19162)."""

CRITIC_SYSTEM = "You check answers to problems."
CRITIC_QUESTION = "Is the answer correct? Reply with 'Verdict: correct' or 'Verdict: incorrect'."
_VERDICT_WORD = re.compile(r"\b(incorrect|not\s+correct|wrong|correct)\b", re.IGNORECASE)
_VERDICT_MARK = re.compile(r"verdict\s*:", re.IGNORECASE)


def parse_verdict(text: str) -> Judgement | None:
    """A critic's verdict: the first of ``incorrect`` / ``not correct`` / ``wrong`` (→ incorrect) or
    ``correct`` (→ correct) after the first ``Verdict:`` (anywhere when there is none); None when
    no such word follows (a format error). Case is ignored.

    >>> parse_verdict("Verdict: correct"), parse_verdict("Verdict: **Incorrect**."), parse_verdict("Verdict: 12")
    ('correct', 'incorrect', None)
    """
    mark = _VERDICT_MARK.search(text)
    word = _VERDICT_WORD.search(text, mark.end() if mark else 0)
    if word is None:
        return None
    return "correct" if word.group(1).lower() == "correct" else "incorrect"


@dataclass(frozen=True)
class Proposal:
    """A teacher's parsed proposal.

    Attributes:
        problem: the problem statement shown to the student.
        program: the source the verifier runs to get the ground truth ("" when the task
            needs none).
        raw: the teacher's full completion text.
    """

    problem: str
    program: str
    raw: str


@dataclass(frozen=True)
class Verdict:
    """The verifier's decision on one proposal.

    Attributes:
        valid: True when the proposal parses, runs, is deterministic and yields an answer.
        answer: the ground truth, JSON-serialisable (a float for numeric tasks, a dict for
            ``code``); None when invalid. It is written to ``matches.jsonl``.
        reason: "ok" or a short machine-readable cause ("parse", "timeout", "banned",
            "error", "nondeterministic", "not_numeric", "memory", "output_limit").
        seconds: wall-clock seconds the verifier spent, >= 0.
    """

    valid: bool
    answer: Any
    reason: str
    seconds: float = 0.0


@dataclass(frozen=True)
class Grade:
    """A graded student answer.

    Attributes:
        label: "correct", "wrong" (well formed but not equal) or "format" (no final answer).
        predicted: the parsed final answer (a float for numeric tasks; JSON-serialisable),
            or None on a format error.
    """

    label: GradeLabel
    predicted: Any


@dataclass(frozen=True)
class ProposalRequest:
    """Everything a teacher rollout needs for one prompt.

    Attributes:
        messages: the chat prompt.
        prefix: text the answer is forced to start with (prepended before parsing).
        examples: the reference problems shown in ``messages``, as the student would see
            them (the repetition rule penalises a proposal equal to one of them).
        segments: the structure after ``prefix``; empty means one free-form segment.

    Source: PopuLoRA (arXiv 2605.16727) §2 step 2 (the teacher's prompt with references);
    R-Zero (arXiv 2508.05004) repetition penalty.
    """

    messages: list[Message]
    prefix: str = ""
    examples: tuple[str, ...] = ()
    segments: tuple[Segment, ...] = ()


def normalise_problem(text: str) -> str:
    """A problem's identity for the repetition rule: lowercased, whitespace removed,
    trailing punctuation dropped ("7 + 5" == "7+5" == "7 + 5?"; "7 + 6" differs).

    >>> normalise_problem("What is 7 +  5?"), normalise_problem("what is 7+5")
    ('whatis7+5', 'whatis7+5')
    """
    return "".join(text.lower().split()).rstrip("?.!:;,")


@dataclass(frozen=True)
class HeldOutItem:
    """One held-out evaluation problem: a question and its answer (a float for numeric
    tasks; any JSON-serialisable value the task's grader understands), and the stratum it
    belongs to (``group``, e.g. arith's ``"d2o1"``: 2-digit numbers, 1 operator; None: no
    strata), which held-out results count separately (``by_group``)."""

    question: str
    answer: Any
    group: str | None = None


class Task(ABC):
    """A verifiable game between a teacher and a student: everything the loop needs from one.

    Subclass it and implement the six abstract methods; every other hook has a default that
    a task overrides only when it needs to. Implementations: :class:`evolora.tasks.gsm.GSMTask`,
    :class:`evolora.tasks.arith.ArithTask`, :class:`evolora.tasks.code.CodeTask`,
    :class:`evolora.tasks.toy.ToyTask`. Register new ones with :func:`evolora.tasks.register_task`.

    Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-4 (propose, verify, solve, grade).
    """

    name: str = "task"
    """The name used in YAML (``task.name``)."""
    params_type: type | None = None
    """The frozen dataclass of the task's settings (``task.params``, e.g.
    :class:`evolora.tasks.arith.params.ArithParams`), whose fields are the names the registry
    accepts; None: the constructor's own keyword arguments are the settings."""
    proposal_prefix: str = ""
    """Text the teacher's answer is forced to start with (e.g. ``"Problem:"``); "" for none.
    It is appended after the chat template's assistant header and prepended to the
    completion before parsing, which keeps a small model on the expected format."""
    complexity_kind: str = "program"
    """How :func:`evolora.metrics.proposal_complexity` measures a valid problem: "program"
    (its program's AST) or "expression" (the problem's arithmetic expression)."""
    reference_solutions: bool = False
    """True when :meth:`reference_solution` writes answers (``selfplay.guidance`` needs it)."""
    held_out_source: str = "the task's held-out set"
    """Where :meth:`held_out` problems come from, recorded in ``summary.json``."""
    critic_prefix: str = "Verdict:"
    """Text a critic's verdict is forced to start with (prepended before :meth:`parse_verdict`)."""
    answer_stop: tuple = ()
    """Where a student's answer (rollout and held-out) ends besides EOS and the token cap: stop
    strings or compiled patterns (:mod:`evolora.generation.stops`), kept in the text. Only for a
    format whose grade ignores what follows the first finished answer. Empty: none."""

    @abstractmethod
    def proposal_prompt(self, rng: random.Random) -> list[Message]:
        """The teacher's chat prompt, with reference examples drawn with ``rng``."""

    @abstractmethod
    def parse_proposal(self, text: str) -> Proposal | None:
        """Parse a teacher completion; None when it is malformed."""

    @abstractmethod
    def verify(self, proposals: list[Proposal | None]) -> list[Verdict]:
        """Run the verifier on each proposal (sandboxed, possibly in parallel)."""

    @abstractmethod
    def solve_prompt(self, problem: str) -> list[Message]:
        """The student's chat prompt for one problem."""

    @abstractmethod
    def grade(self, completion: str, answer: Any) -> Grade:
        """Grade a student completion against the ground truth."""

    @abstractmethod
    def held_out(self, limit: int, rng: random.Random) -> list[HeldOutItem] | None:
        """Up to ``limit`` held-out problems, or None when no data is available."""

    def dev_set(self, size: int) -> list[HeldOutItem] | None:
        """Up to ``size`` dev problems for the validation fitness (``evolution.fitness``): drawn from
        the training distribution, never from :meth:`held_out`'s items, the same on every call.
        Default None: the task has no dev set, and a validation fitness is refused before any model loads."""
        return None

    family_source: str = "the teachers' problem family"
    """What :meth:`family_held_out`'s items measure (recorded beside the results)."""

    def family_held_out(self, limit: int, seed: int, exclude: set[str]) -> tuple[list[HeldOutItem], int] | None:
        """Up to ``limit`` problems of the teachers' own family whose normalised text
        (:func:`normalise_problem`) is not in ``exclude``, drawn with ``seed``, and the number of draws
        skipped as excluded (``eval.family``: :mod:`evolora.evaluation.family`). Default None: no family set."""
        return None

    def proposal_request(self, rng: random.Random) -> ProposalRequest:
        """One teacher rollout's request: prompt, forced start, shown examples and segments.

        Default: :meth:`proposal_prompt` with the fixed :attr:`proposal_prefix`, one segment.
        """
        return ProposalRequest(self.proposal_prompt(rng), self.proposal_prefix)

    def held_out_prompt(self, item: HeldOutItem) -> list[Message]:
        """The prompt of one held-out problem. Default: :meth:`solve_prompt` of its question."""
        return self.solve_prompt(item.question)

    def grade_held_out(self, completions: list[str], items: list[HeldOutItem]) -> list[Grade]:
        """Grades of held-out completions, batched (one per item, in order). Default:
        :meth:`grade` of each against its item's answer."""
        return [self.grade(completion, item.answer) for completion, item in zip(completions, items)]

    def reference_solution(self, problem: str, answer: Any) -> str | None:
        """A correct answer to a verified problem, written as a student answers, for off-policy
        guidance (``selfplay.guidance``; LUFFY, arXiv 2504.14945): the verifier's ground truth
        ``answer`` put in words. Default None: the task has none, and guidance is refused at
        config validation (:attr:`reference_solutions`)."""
        return None

    def critic_answer(self, completion: str) -> str:
        """The student's answer as a critic is shown it. Default: the completion, stripped and cut
        to 400 characters."""
        return completion.strip()[:400]

    def critic_prompt(self, problem: str, completion: str) -> list[Message]:
        """A critic's chat prompt for one problem and one student completion (the critic role,
        SPC arXiv 2504.19162): the problem, :meth:`critic_answer`, and the question to reply
        ``Verdict: correct`` or ``Verdict: incorrect``."""
        content = f"Problem: {problem}\nProposed answer: {self.critic_answer(completion)}\n{CRITIC_QUESTION}"
        return [{"role": "system", "content": CRITIC_SYSTEM}, {"role": "user", "content": content}]

    def parse_verdict(self, text: str) -> Judgement | None:
        """A critic's verdict from its text (:attr:`critic_prefix` included); None on a format error.
        Default: :func:`parse_verdict`."""
        return parse_verdict(text)

    def close(self) -> None:
        """Release what the verifier holds (worker pools); a later call to it starts anew."""
