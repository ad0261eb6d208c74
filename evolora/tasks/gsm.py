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
from evolora.tasks.code_values import FENCE
from evolora.tasks.gsm_data import BUNDLED_TEST, _load_train, gsm_dev_set, load_bundled_test, load_gsm8k
from evolora.tasks.gsm_family import family_items
from evolora.tasks.gsm_grounding import RULES, grounding_reasons
from evolora.tasks.gsm_proposal_modes import PROPOSAL_MODES, SeededProposals
from evolora.tasks.gsm_text import _PROBLEM_HEADER, _drop_trailing_label, format_proposal, program_answer
from evolora.tasks.number_equality import numbers_equal
from evolora.tasks.numeric import MAX_TEXT_CHARS, final_value, json_number, marked_value
from evolora.tasks.pooled import PooledVerifier

DATA = Path(__file__).resolve().parent.parent / "data"
EXAMPLES_PATH = DATA / "gsm_examples.json"
"""Reference examples written for evolora: {"examples": [{"problem", "program", "answer"}]}."""
EXAMPLE_SETS = {"default": EXAMPLES_PATH, "simple": DATA / "gsm_simple_examples.json"}
"""``example_set`` names: ``default`` (12 problems of two to four steps) or ``simple`` (16 of
one or two steps, which a 135M student sometimes solves)."""
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

    Args:
        train_path: GSM8K train jsonl ({"question", "answer"}, answer ending "#### N").
            When given, each teacher example comes from it with probability
            ``gsm8k_fraction`` (its program is rebuilt from the <<a*b=c>> calculator
            annotations); otherwise all examples are evolora's own
            (``evolora/data/gsm_examples.json``, 12 problems with real programs).
        eval_path: GSM8K test jsonl (or .jsonl.gz) for :meth:`held_out`. None: the GSM8K
            test split shipped inside the package (1,319 problems, ``evolora/data``).
        num_examples: reference examples in the teacher prompt (>= 0; each costs ~50-100
            prompt tokens).
        gsm8k_fraction: probability in [0, 1] that one example is a GSM8K train problem
            (only used with ``train_path``).
        timeout_s: wall-clock limit per program run, seconds.
        memory_mb: address-space limit per program run, MiB.
        output_limit: stdout cap per program run, bytes.
        workers: programs run concurrently by the verifier.
        runs: runs per program; all must agree (determinism check), >= 1.
        max_problem_chars: longer problem statements are malformed.
        max_program_chars: longer programs are malformed.
        require_marker: when True a student completion without "#### <number>" grades as
            "format"; when False the final number is found leniently (boxed, "answer is",
            last number).
        tolerance: relative and absolute tolerance when comparing two non-integers
            (integers and rationals always compare exactly).
        example_set: which of evolora's own example sets (:data:`EXAMPLE_SETS`) to draw from.
        structured: True makes the teacher rollout two segments (:meth:`proposal_request`):
            the problem, stopped at a blank line or a fence; then the forced
            :data:`PROGRAM_FENCE` and the program, stopped at the closing fence.
        problem_tokens, program_tokens: token limits of the two segments (>= 1).
        program_temperature: sampling temperature of the program segment (> 0); None: the
            teacher's. The problem keeps the teacher's temperature (its diversity), the
            program is written closer to greedy (its validity).
        forced_print: a third segment: the program segment also stops at ``print(``, then
            ``print(`` is forced and the model writes the printed expression (one line), so
            every program ends by printing a value.
        grounding: the grounding rules a valid program must also pass
            (:mod:`evolora.tasks.gsm_grounding`): True (all of :data:`~evolora.tasks.gsm_grounding.RULES`),
            False (none: any program that prints a number is the truth), or a list of rule names.
        proposal: what the teacher writes (:data:`~evolora.tasks.gsm_proposal_modes.PROPOSAL_MODES`):
            ``free`` (a new problem and program after ``num_examples`` examples), ``seeded`` (a GSM8K
            train seed's program is given; the teacher calls it with new numbers, then writes a problem
            stating them in order), ``numbers`` (the seed's text and program are given with their numbers
            blanked; the teacher writes only the new numbers).
        value_tokens: token limit of the numbers segment of ``seeded`` and ``numbers`` (>= 1).
        value_temperature: sampling temperature of that segment (> 0; None: the teacher's).
        simple_fraction: with ``seeded`` or ``numbers``, the probability in [0, 1] that a seed is one of
            evolora's simple problems (one or two steps; a 135M student sometimes solves them) rather
            than one of the 300 GSM8K train seeds shipped in ``evolora/data/gsm_seeds.json``.
    """

    name = "gsm"
    proposal_prefix = "Problem:"
    complexity_kind = "program"

    def __init__(
        self,
        *,
        train_path: str | None = None,
        eval_path: str | None = None,
        num_examples: int = 2,
        gsm8k_fraction: float = 0.5,
        timeout_s: float = 2.0,
        memory_mb: int = 256,
        output_limit: int = 4096,
        workers: int = 2,
        runs: int = 2,
        max_problem_chars: int = 1200,
        max_program_chars: int = 3000,
        require_marker: bool = False,
        tolerance: float = 1e-6,
        example_set: str = "default",
        structured: bool = False,
        problem_tokens: int = 96,
        program_tokens: int = 96,
        program_temperature: float | None = None,
        forced_print: bool = False,
        grounding: bool | list[str] = True,
        proposal: str = "free",
        value_tokens: int = 24,
        value_temperature: float | None = 1.0,
        simple_fraction: float = 0.0,
    ) -> None:
        _check_params(
            num_examples=num_examples,
            runs=runs,
            workers=workers,
            gsm8k_fraction=gsm8k_fraction,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            output_limit=output_limit,
            tolerance=tolerance,
            example_set=example_set,
            structured=structured,
            problem_tokens=problem_tokens,
            program_tokens=program_tokens,
            program_temperature=program_temperature,
            proposal=proposal,
            value_tokens=value_tokens,
            value_temperature=value_temperature,
            simple_fraction=simple_fraction,
        )
        for key, path in (("eval_path", eval_path), ("train_path", train_path)):
            if path is not None and not Path(path).is_file():
                raise FileNotFoundError(
                    f"gsm task: {key} {path!r} is not a file; give a GSM8K .jsonl path "
                    f"(--set task.params.{key}=PATH) or null"
                )
        self.train_path = train_path
        self.eval_path = eval_path
        self.num_examples = num_examples
        self.gsm8k_fraction = gsm8k_fraction
        self.limits = {"timeout_s": timeout_s, "memory_mb": memory_mb, "output_limit": output_limit}
        self.workers = workers
        self.runs = runs
        self.max_problem_chars = max_problem_chars
        self.max_program_chars = max_program_chars
        self.require_marker = require_marker
        self.tolerance = tolerance
        self.examples: list[dict] = _load_examples(EXAMPLE_SETS[example_set])
        self.structured = structured
        self.segment_tokens = (problem_tokens, program_tokens)
        self.program_temperature = program_temperature
        self.forced_print = bool(forced_print)
        self.grounding = _grounding_rules(grounding)
        self._train: list[dict] | None = _load_train(Path(train_path)) if train_path else None
        self._eval: list[HeldOutItem] | None = None
        self._pool: SandboxPool | None = None
        self.proposal = proposal
        self._seeded = (
            SeededProposals(proposal, value_tokens, problem_tokens, value_temperature, simple_fraction)
            if proposal != "free"
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
        :meth:`evolora.tasks.gsm_proposal_modes.SeededProposals.parse`.
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
        (:func:`evolora.tasks.gsm_grounding.grounding_reasons`: the program does not answer its
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
        """:func:`evolora.tasks.gsm_family.family_items` of the seeds this task's teachers vary; None
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


def _check_params(
    *,
    num_examples,
    runs,
    workers,
    gsm8k_fraction,
    timeout_s,
    memory_mb,
    output_limit,
    tolerance,
    example_set,
    structured,
    problem_tokens,
    program_tokens,
    program_temperature,
    proposal,
    value_tokens,
    value_temperature,
    simple_fraction,
) -> None:
    """Raise ValueError naming every out-of-range :class:`GSMTask` parameter and its allowed range."""
    if num_examples < 0 or runs < 1 or workers < 1 or not 0.0 <= gsm8k_fraction <= 1.0:
        raise ValueError(
            f"gsm task: need num_examples >= 0 (got {num_examples}), runs >= 1 (got {runs}), "
            f"workers >= 1 (got {workers}), 0 <= gsm8k_fraction <= 1 (got {gsm8k_fraction})"
        )
    if timeout_s <= 0 or memory_mb < 32 or output_limit < 1 or tolerance < 0:
        raise ValueError(
            f"gsm task: need timeout_s > 0 (got {timeout_s}), memory_mb >= 32 (got {memory_mb}), "
            f"output_limit >= 1 (got {output_limit}), tolerance >= 0 (got {tolerance})"
        )
    if example_set not in EXAMPLE_SETS or not isinstance(structured, bool) or min(problem_tokens, program_tokens) < 1:
        raise ValueError(
            f"gsm task: need example_set in {sorted(EXAMPLE_SETS)} (got {example_set!r}), structured "
            f"true/false (got {structured!r}), problem_tokens and program_tokens >= 1 "
            f"(got {problem_tokens}, {program_tokens})"
        )
    if program_temperature is not None and not program_temperature > 0:
        raise ValueError(f"gsm task: need program_temperature > 0 or null (got {program_temperature!r})")
    if (
        proposal not in PROPOSAL_MODES
        or value_tokens < 1
        or not (value_temperature is None or value_temperature > 0)
        or not 0.0 <= simple_fraction <= 1.0
    ):
        raise ValueError(
            f"gsm task: need proposal in {list(PROPOSAL_MODES)} (got {proposal!r}), value_tokens "
            f">= 1 (got {value_tokens}), value_temperature > 0 or null (got {value_temperature!r}) "
            f"and 0 <= simple_fraction <= 1 (got {simple_fraction!r})"
        )


def _grounding_rules(grounding: bool | list[str]) -> tuple[str, ...]:
    """The rule names of ``grounding`` (True: all, False: none).

    Raises:
        ValueError: an unknown rule name (the message lists them).
    """
    if isinstance(grounding, bool):
        return RULES if grounding else ()
    if not isinstance(grounding, (list, tuple)) or any(r not in RULES for r in grounding):
        raise ValueError(f"gsm task: grounding is true, false or a list of {', '.join(RULES)}; got {grounding!r}")
    return tuple(grounding)


def _load_examples(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)["examples"]
