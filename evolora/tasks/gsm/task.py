"""The ``gsm`` task: grade-school math word problems with a verifying program.

The teacher writes one word problem and a short Python program that prints its answer;
the sandbox runs the program (valid = refused by no check, exits cleanly twice with the
same output, and its last output line is a finite number: that number is the ground
truth); the student answers in words ending with "#### <number>"; the grade is numeric.
Held-out evaluation: GSM8K test (answer after "####").

Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-3; GSM8K (arXiv 2110.14168).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from evolora.parsing import FENCE
from evolora.sandbox import SandboxPool
from evolora.tasks.base import (
    CRITIC_QUESTION,
    CRITIC_SYSTEM,
    Grade,
    HeldOutItem,
    Message,
    Proposal,
    ProposalRequest,
    Segment,
    Verdict,
)
from evolora.tasks.gsm.data import BUNDLED_TEST, _load_train, gsm_dev_set, load_bundled_test, load_gsm8k
from evolora.tasks.gsm.family import family_items
from evolora.tasks.gsm.grounding import grounding_reasons
from evolora.tasks.gsm.params import EXAMPLE_SETS, GSMParams, grounding_rules
from evolora.tasks.gsm.proposal_modes import SeededProposals
from evolora.tasks.gsm.text import _PROBLEM_HEADER, _drop_trailing_label, format_proposal, program_answer
from evolora.tasks.number_equality import numbers_equal
from evolora.tasks.numeric import MAX_TEXT_CHARS, final_value, json_number, marked_value
from evolora.tasks.params import task_params
from evolora.tasks.pooled import PooledVerifier

PROGRAM_FENCE = "\n```python\n"
"""Forced between the problem and the program in ``structured`` rollouts."""

TEACHER_SYSTEM = "You write grade-school math word problems and Python programs that solve them."
TEACHER_INSTRUCTION = (
    "Write one new math word problem and a short Python program that prints its answer "
    "as a number. Use exactly this format:\n\n"
    "Problem: <the problem>\n```python\n<the program>\n```"
)
TEACHER_CLOSING = "Now write a new, different problem."
STUDENT_SYSTEM = "You are a careful math tutor."
STUDENT_INSTRUCTION = 'Solve it step by step, briefly. End with a line "#### <number>".'
ANSWER_LINE = re.compile(r"####[^\n]*\d[^\n]*\n")
"""A finished answer line: "####", a number, the line's end. A student's answer stops there
(:attr:`GSMTask.answer_stop`): the instruction ends the answer with that line, and a 135M model
that goes on writes more "####" lines ("#### 2", "#### 3", ...), the last of which
:func:`~evolora.tasks.numeric.final_value` would grade. docs/results/gsm.md measures the change."""


class GSMTask(PooledVerifier):
    """Grade-school math with program-verified answers (task name "gsm").

    The teacher's answer is forced to begin with ``"Problem:"`` (:attr:`proposal_prefix`).

    Settings: :class:`~evolora.tasks.gsm.params.GSMParams` (``task.params`` in YAML).
    """

    name = "gsm"
    params_type = GSMParams
    proposal_prefix = "Problem:"
    complexity_kind = "program"

    def __init__(self, params: GSMParams | None = None, /, **settings) -> None:
        """``params`` (None: the defaults), with ``settings`` replacing its fields by name.

        Raises:
            ValueError: a setting that is no field of :class:`GSMParams` (the message lists them),
                or a value out of its range.
            FileNotFoundError: ``train_path`` or ``eval_path`` is not a file.
        """
        self.params = p = task_params(GSMParams, params, settings, self.name)
        self.train_path = p.train_path
        self.eval_path = p.eval_path
        self.num_examples = p.num_examples
        self.gsm8k_fraction = p.gsm8k_fraction
        self.limits = {"timeout_s": p.timeout_s, "memory_mb": p.memory_mb, "output_limit": p.output_limit}
        self.workers = p.workers
        self.runs = p.runs
        self.max_problem_chars = p.max_problem_chars
        self.max_program_chars = p.max_program_chars
        self.require_marker = p.require_marker
        self.tolerance = p.tolerance
        self.examples: list[dict] = _load_examples(EXAMPLE_SETS[p.example_set])
        self.structured = p.structured
        self.segment_tokens = (p.problem_tokens, p.program_tokens)
        self.program_temperature = p.program_temperature
        self.forced_print = bool(p.forced_print)
        self.grounding = grounding_rules(p.grounding)
        self._train: list[dict] | None = _load_train(Path(p.train_path)) if p.train_path else None
        self._eval: list[HeldOutItem] | None = None
        self._pool: SandboxPool | None = None
        self.proposal = p.proposal
        self._seeded = (
            SeededProposals(p.proposal, p.value_tokens, p.problem_tokens, p.value_temperature, p.simple_fraction)
            if p.proposal != "free"
            else None
        )

    # ------------------------------------------------------------------ teacher side
    def proposal_prompt(self, rng: random.Random) -> list[Message]:
        """System + one user message: the format, ``num_examples`` examples, a request (with a seeded
        ``proposal`` mode: the seed and the request, :meth:`proposal_request`)."""
        if self._seeded is not None:
            return self._seeded.request(rng).messages
        return self._prompt(self._draw_examples(rng))

    def _prompt(self, examples: list[dict]) -> list[Message]:
        parts = [TEACHER_INSTRUCTION]
        if examples:
            parts.append("Examples:")
            for example in examples:
                parts.append(format_proposal(example["problem"], example["program"]))
        parts.append(TEACHER_CLOSING)
        return [{"role": "system", "content": TEACHER_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]

    def proposal_request(self, rng: random.Random) -> ProposalRequest:
        """The teacher prompt (:meth:`proposal_prompt`), the forced start ``"Problem:"``, the
        example problems it shows, and with ``structured`` the two segments: the problem
        (stop at a blank line or a fence, the stop token dropped), then the forced
        :data:`PROGRAM_FENCE` and the program (stop at the closing fence)."""
        if self._seeded is not None:
            return self._seeded.request(rng)
        examples = self._draw_examples(rng)
        segments = self._segments() if self.structured else ()
        return ProposalRequest(
            self._prompt(examples),
            self.proposal_prefix,
            examples=tuple(e["problem"] for e in examples),
            segments=segments,
        )

    def _segments(self) -> tuple[Segment, ...]:
        problem = Segment(stop=("```", "\n\n"), max_new_tokens=self.segment_tokens[0], keep_stop=False)
        if not self.forced_print:
            return problem, Segment(
                forced=PROGRAM_FENCE,
                stop=("```",),
                max_new_tokens=self.segment_tokens[1],
                temperature=self.program_temperature,
            )
        body = Segment(
            forced=PROGRAM_FENCE,
            stop=("```", "print("),
            max_new_tokens=self.segment_tokens[1],
            keep_stop=False,
            temperature=self.program_temperature,
        )
        return (
            problem,
            body,
            Segment(forced="print(", stop=("\n",), max_new_tokens=24, temperature=self.program_temperature),
        )

    def _draw_examples(self, rng: random.Random) -> list[dict]:
        own = rng.sample(self.examples, min(self.num_examples, len(self.examples)))
        if not self._train:
            return own
        return [rng.choice(self._train) if rng.random() < self.gsm8k_fraction else example for example in own]

    def parse_proposal(self, text: str) -> Proposal | None:
        """Problem text (an optional "Problem:" header) followed by a code fence.

        Tolerates a fence without a language tag or without its closing backticks, text
        after the program, Markdown bold headers and a "Program:" label before the fence.
        Returns None when there is no fence (in the first
        :data:`evolora.tasks.numeric.MAX_TEXT_CHARS` characters), no problem text (>= 3
        words, no code), an empty program, or either part is longer than its limit.
        Linear time in ``len(text)``. With a seeded ``proposal`` mode:
        :meth:`evolora.tasks.gsm.proposal_modes.SeededProposals.parse`.
        """
        if self._seeded is not None:
            return self._seeded.parse(text)
        fence = FENCE.search(text, 0, MAX_TEXT_CHARS)
        if fence is None:
            return None
        program = fence.group(1).strip("\n").rstrip()
        before = text[: fence.start()]
        header = None
        for header in _PROBLEM_HEADER.finditer(before):
            pass
        problem = _drop_trailing_label(before[header.end() :] if header else before).strip().strip("*").strip()
        if (
            not program.strip()
            or len(problem.split()) < 3
            or "```" in problem
            or "print(" in problem
            or len(problem) > self.max_problem_chars
            or len(program) > self.max_program_chars
        ):
            return None
        return Proposal(problem=problem, program=program, raw=text)

    def verify(self, proposals: list[Proposal | None]) -> list[Verdict]:
        """Run every program ``runs`` times (all in parallel) and decide validity.

        A None entry (a completion ``parse_proposal`` rejected) gets reason "parse", so
        callers can pass ``[task.parse_proposal(t) for t in texts]`` unchanged. Reasons:
        "parse", "banned", "timeout", "memory", "error", "output_limit" (the first failing
        run's sandbox status), "nondeterministic" (outputs differ), "not_numeric" (the
        last non-empty output line is not a finite number), a grounding reason
        (:func:`evolora.tasks.gsm.grounding.grounding_reasons`: the program does not answer its
        own text; the answer is kept, ``valid`` is False), "ok". ``seconds`` is the
        sandbox wall-clock time summed over this proposal's runs.
        """
        sources = [p.program for p in proposals if p is not None for _ in range(self.runs)]
        results = iter(self._get_pool().map(sources, **self.limits) if sources else [])
        verdicts = []
        for proposal in proposals:
            if proposal is None:
                verdicts.append(Verdict(False, None, "parse", 0.0))
                continue
            runs = [next(results) for _ in range(self.runs)]
            seconds = sum(r.seconds for r in runs)
            failed = next((r for r in runs if r.status != "ok"), None)
            if failed is not None:
                verdicts.append(Verdict(False, None, failed.status, seconds))
            elif any(r.output != runs[0].output for r in runs[1:]):
                verdicts.append(Verdict(False, None, "nondeterministic", seconds))
            else:
                verdicts.append(self._grounded(proposal, program_answer(runs[0].output), seconds))
        return verdicts

    def _grounded(self, proposal: Proposal, answer: float | int | None, seconds: float) -> Verdict:
        """The verdict of a program that ran cleanly: ``not_numeric``, the first grounding rule it
        breaks (its answer kept for the records), or ``ok``."""
        if answer is None:
            return Verdict(False, None, "not_numeric", seconds)
        reasons = (
            grounding_reasons(proposal.problem, proposal.program, answer, self.grounding) if self.grounding else []
        )
        if self._seeded is not None:
            reasons = self._seeded.reasons(proposal, answer) + reasons
        return Verdict(not reasons, answer, reasons[0] if reasons else "ok", seconds)

    # ------------------------------------------------------------------ student side
    answer_stop = (ANSWER_LINE,)

    def solve_prompt(self, problem: str) -> list[Message]:
        return [
            {"role": "system", "content": STUDENT_SYSTEM},
            {"role": "user", "content": f"{problem.strip()}\n\n{STUDENT_INSTRUCTION}"},
        ]

    def grade(self, completion: str, answer: float) -> Grade:
        """ "correct"/"wrong" by exact comparison (:func:`evolora.tasks.number_equality.numbers_equal`:
        integers exactly, ``tolerance`` only between non-integers), "format" when no final
        number is found. ``predicted`` is :func:`~evolora.tasks.numeric.json_number` of it."""
        predicted = marked_value(completion) if self.require_marker else final_value(completion)
        if predicted is None:
            return Grade("format", None)
        correct = numbers_equal(predicted, answer, rel=self.tolerance, abs=self.tolerance)
        return Grade("correct" if correct else "wrong", json_number(predicted, nearest=True))

    def critic_prompt(self, problem: str, completion: str) -> list[Message]:
        """A critic's prompt: the word problem, the student's worked solution (up to 600 characters)
        and the question ending in ``Verdict: correct`` / ``Verdict: incorrect`` (SPC arXiv 2504.19162)."""
        solution = completion.strip()[:600]
        return [
            {"role": "system", "content": CRITIC_SYSTEM},
            {
                "role": "user",
                "content": f"Problem: {problem.strip()}\n\nProposed solution:\n{solution}\n\n"
                f"Is the final answer correct? {CRITIC_QUESTION.split('? ', 1)[1]}",
            },
        ]

    # ------------------------------------------------------------------ evaluation
    @property
    def held_out_source(self) -> str:
        """Where :meth:`held_out` reads its problems: the given path, or the bundled copy."""
        if self.eval_path is not None:
            return f"GSM8K test file {self.eval_path}"
        return f"GSM8K test split bundled with evolora ({BUNDLED_TEST.name}, 1319 problems)"

    def held_out(self, limit: int, rng: random.Random) -> list[HeldOutItem] | None:
        """The first ``limit`` GSM8K test problems in file order (deterministic; ``rng``
        is unused), from ``eval_path`` or else the test split bundled in the package.

        Raises:
            FileNotFoundError: ``eval_path`` is given but does not exist.
            ValueError: ``eval_path`` has a malformed line.
        """
        if self._eval is None:
            self._eval = load_gsm8k(Path(self.eval_path)) if self.eval_path is not None else load_bundled_test()
        return self._eval[: max(limit, 0)]

    dev_set = gsm_dev_set  # the validation-fitness dev set: the last problems of train_path, or None

    family_source = (
        "the teachers' problem family: the seeds they vary, with their probabilities, on new "
        "numbers no teacher proposed in the run (in-distribution skill, not GSM8K transfer)"
    )

    def family_held_out(self, limit: int, seed: int, exclude: set[str]) -> tuple[list[HeldOutItem], int] | None:
        """:func:`evolora.tasks.gsm.family.family_items` of the seeds this task's teachers vary; None
        with ``proposal: free`` (no seeds, so no family)."""
        if self._seeded is None:
            return None
        return family_items(
            self._seeded.seeds,
            self._seeded.simple,
            simple_fraction=self._seeded.simple_fraction,
            limit=limit,
            seed=seed,
            exclude=exclude,
        )


def _load_examples(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)["examples"]
