"""The ``arith`` task: arithmetic expressions, verified exactly without ``eval``.

The teacher writes one expression on a line (``Problem: (3 + 4) * 2``); the verifier
parses it with :mod:`ast`, walks the tree itself and computes the value with exact
rational arithmetic (:class:`fractions.Fraction`). Only numbers, ``+ - * / // % **``,
unary signs and parentheses are accepted; everything else (names, calls, attributes,
strings, comparisons, ...) is refused before any arithmetic happens, and limits on
length, digits, operators, nesting, exponents and magnitude bound the work.

Validity: the expression parses, passes every limit, never divides by zero, and its value
is an integer (``integer_only=True``, the default: a student can then state the answer
exactly; ``7 / 2 * 2`` is valid, ``1 / 3`` is not). With ``integer_only=False`` any
finite rational value is valid and graded with ``tolerance``. The student answers with
a number (:func:`evolora.tasks.numeric.arithmetic_value`); grading is exact for integers.

Held-out evaluation: a fixed grid of problems by difficulty (digits per number ×
binary operators, ``eval_per_cell`` per cell) generated from ``eval_seed``, interleaved
so that the first k items cover the cells as evenly as possible.

Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-3 (the teacher proposes a verifiable problem,
the verifier computes its answer). The arithmetic task and its grid are evolora's own, sized
so that learning shows on a CPU.
"""

from __future__ import annotations

import random
import re

from evolora.tasks.arith.evaluate import ALLOWED_CHARS, ExpressionError, evaluate_expression
from evolora.tasks.arith.params import ArithParams, grid_cells
from evolora.tasks.arith.prompts import EXAMPLES, TEACHER_CLOSING, TEACHER_INSTRUCTION, TEACHER_SYSTEM
from evolora.tasks.arith.text import _arithmetic_span, format_number, normalise_expression, random_expression
from evolora.tasks.base import Grade, HeldOutItem, Message, Proposal, ProposalRequest, Task, Verdict
from evolora.tasks.number_equality import numbers_equal
from evolora.tasks.numeric import MAX_TEXT_CHARS, arithmetic_value, json_number
from evolora.tasks.params import task_params

_HEADER = re.compile(r"problem\s*(?:\d+\s*)?:", re.IGNORECASE)  # one \s* per run of spaces: linear


class ArithTask(Task):
    """Arithmetic expressions with exactly computed answers (task name "arith").

    The teacher's answer is forced to begin with ``"Problem:"`` (:attr:`proposal_prefix`);
    the first line after it is the expression. The problem shown to the student is the
    normalised expression; :attr:`Proposal.program` holds the same text (what the
    verifier evaluates).

    Settings: :class:`~evolora.tasks.arith.params.ArithParams` (``task.params`` in YAML).
    """

    name = "arith"
    params_type = ArithParams
    reference_solutions = True
    held_out_source = "arith held-out grid (generated from eval_seed, never shown to teachers)"
    proposal_prefix = "Problem:"
    complexity_kind = "expression"
    """Which :func:`evolora.metrics.proposal_complexity` applies to this task's proposals."""

    def __init__(self, params: ArithParams | None = None, /, **settings) -> None:
        """``params`` (None: the defaults), with ``settings`` replacing its fields by name.

        Raises:
            ValueError: a setting that is no field of :class:`ArithParams` (the message lists them),
                or a value out of its range.
        """
        self.params = p = task_params(ArithParams, params, settings, self.name)
        self.cells = grid_cells(p.eval_digits, p.eval_ops, p.eval_cells)
        self.reference = p.reference
        self.student_instruction = p.student_instruction.strip()
        self.lenient_parse = p.lenient_parse
        self.num_examples = p.num_examples
        self.examples = p.examples
        self.example_size = (p.example_digits, p.example_ops)
        self.limits = {
            "max_chars": p.max_chars,
            "max_digits": p.max_digits,
            "max_depth": p.max_depth,
            "max_ops": p.max_ops,
            "max_value": p.max_value,
            "max_exponent": p.max_exponent,
            "min_ops": 1,
        }
        self.integer_only = p.integer_only
        self.eval_seed = p.eval_seed
        self.eval_digits = p.eval_digits
        self.eval_ops = p.eval_ops
        self.eval_per_cell = p.eval_per_cell
        self.tolerance = p.tolerance
        self._grid: list[HeldOutItem] | None = None

    # ------------------------------------------------------------------ teacher side
    def proposal_prompt(self, rng: random.Random) -> list[Message]:
        """System + one user message: the request, ``num_examples`` examples, a closing line."""
        return self.proposal_request(rng).messages

    def proposal_request(self, rng: random.Random) -> ProposalRequest:
        """The teacher prompt, its forced start ``"Problem:"`` and the examples it shows
        (drawn with ``rng``; see ``examples``)."""
        shown = self._draw_examples(rng)
        lines = [TEACHER_INSTRUCTION]
        if shown:
            lines += ["Examples:", *(f"Problem: {e}" for e in shown)]
        lines.append(TEACHER_CLOSING)
        messages = [{"role": "system", "content": TEACHER_SYSTEM}, {"role": "user", "content": "\n".join(lines)}]
        return ProposalRequest(messages, self.proposal_prefix, examples=tuple(shown))

    def _draw_examples(self, rng: random.Random) -> list[str]:
        if self.examples == "fixed":
            return rng.sample(EXAMPLES, self.num_examples)
        held_out = {item.question for item in self.grid()}
        shown: list[str] = []
        while len(shown) < self.num_examples:
            text = random_expression(rng, rng.randint(1, self.example_size[0]), rng.randint(1, self.example_size[1]))
            if text not in held_out and text not in shown:
                shown.append(text)
        return shown

    def parse_proposal(self, text: str) -> Proposal | None:
        """The expression on the first non-empty line after the first "Problem:" header
        (the whole text when there is none).

        Normalises what small models write around an expression: Markdown/LaTeX
        delimiters, "What is ... ?", a trailing "=", "= ?" or "= <answer>" (dropped, so
        the answer never reaches the student), ×, ÷, −, ^ and square brackets. With
        ``lenient_parse`` a line that still holds words keeps its longest arithmetic span
        ("Given 15 / 3 = 5" → "15 / 3"). Returns None when nothing with a digit is left;
        everything else is the verifier's call (:meth:`verify`).

        >>> ArithTask().parse_proposal("Problem: What is (3 + 4) x 2 = 14?\\nProblem: 1 + 1").problem
        '(3 + 4) * 2'
        """
        header = _HEADER.search(text, 0, MAX_TEXT_CHARS)
        body = text[header.end() : MAX_TEXT_CHARS] if header else text[:MAX_TEXT_CHARS]
        line = next((ln for ln in body.splitlines() if ln.strip()), "")
        expression = normalise_expression(line)
        if self.lenient_parse and not ALLOWED_CHARS.fullmatch(expression):
            expression = _arithmetic_span(expression)
        if not expression or not any(c.isdigit() for c in expression):
            return None
        return Proposal(problem=expression, program=expression, raw=text)

    def verify(self, proposals: list[Proposal | None]) -> list[Verdict]:
        """Evaluate each expression exactly (in-process: the grammar admits no code).

        A None entry gets reason "parse". Reasons: those of :func:`evaluate_expression`,
        "not_integer" (with ``integer_only``), "ok". ``answer`` is the value as a float.
        """
        return [self._verify_one(p) for p in proposals]

    def _verify_one(self, proposal: Proposal | None) -> Verdict:
        if proposal is None:
            return Verdict(False, None, "parse", 0.0)
        try:
            value = evaluate_expression(proposal.program, **self.limits)
        except ExpressionError as exc:
            return Verdict(False, None, exc.reason, 0.0)
        if self.integer_only and value.denominator != 1:
            return Verdict(False, None, "not_integer", 0.0)
        return Verdict(True, float(value), "ok", 0.0)

    # ------------------------------------------------------------------ student side
    def solve_prompt(self, problem: str) -> list[Message]:
        """One short user message: "What is <problem>? Answer with a number." (SmolLM2-135M,
        greedy: 0.71 on one-digit additions with this wording; 0.29 with "<problem> = ?"), or
        ``student_instruction`` in its place."""
        return [{"role": "user", "content": f"What is {problem.strip()}? {self.student_instruction}"}]

    def grade(self, completion: str, answer: float) -> Grade:
        """ "correct"/"wrong" by exact comparison (:func:`evolora.tasks.number_equality.numbers_equal`:
        integers exactly, ``tolerance`` only between non-integers) of
        :func:`evolora.tasks.numeric.arithmetic_value` (an explicit final answer, else the
        stated result ``= N``, else the last number); "format" when the completion holds no
        number. ``predicted`` is :func:`~evolora.tasks.numeric.json_number` of it."""
        predicted = arithmetic_value(completion)
        if predicted is None:
            return Grade("format", None)
        correct = numbers_equal(predicted, answer, rel=self.tolerance, abs=self.tolerance)
        return Grade("correct" if correct else "wrong", json_number(predicted, nearest=True))

    def reference_solution(self, problem: str, answer: float) -> str:
        """A worked answer for ``selfplay.guidance`` (``reference``: ``steps`` or ``answer``),
        see :func:`evolora.tasks.arith.steps.worked_answer`."""
        from evolora.tasks.arith.steps import worked_answer  # it reuses this module's evaluator

        return worked_answer(problem, answer, self.reference, self.tolerance)

    def critic_answer(self, completion: str) -> str:
        """The number the student gave (:func:`evolora.tasks.numeric.arithmetic_value`, written as
        :func:`format_number`), so the critic judges the value and not the wording; the stripped
        completion when it holds none."""
        value = arithmetic_value(completion)
        return format_number(value) if value is not None else completion.strip()[:80]

    # ------------------------------------------------------------------ evaluation
    def held_out(self, limit: int, rng: random.Random | None = None) -> list[HeldOutItem]:
        """The first ``limit`` problems of the held-out grid (``rng`` is unused: the grid
        depends on ``eval_seed`` only). See :meth:`grid`."""
        return self.grid()[: max(limit, 0)]

    def grid(self) -> list[HeldOutItem]:
        """Every held-out problem, interleaved by difficulty.

        Cells are (digits d, operators k) for d in 1..eval_digits, k in 1..eval_ops (or the
        ``eval_cells`` named), ordered by d + k then d (easiest first); each holds ``eval_per_cell`` distinct
        problems built with + - * and parentheses from d-digit numbers. The list takes
        problem 0 of every cell, then problem 1 of every cell, and so on.
        """
        if self._grid is None:
            columns = [self._cell(d, k) for d, k in self.cells]
            self._grid = [column[i] for i in range(self.eval_per_cell) for column in columns]
        return self._grid

    def dev_set(self, size: int) -> list[HeldOutItem]:
        """``size`` dev problems for the validation fitness, interleaved over the grid's cells like
        :meth:`grid` (the same digits × operators distribution), from their own stream
        (``arith-dev:<eval_seed>``) and disjoint from the held-out grid at any ``eval_per_cell`` up to
        :data:`DEV_RESERVED` (the test stream's first problems of each cell are never used)."""
        per_cell = -(-max(size, 0) // len(self.cells))
        columns = [self._dev_cell(d, k, per_cell) for d, k in self.cells]
        items = [column[i] for i in range(per_cell) for column in columns if i < len(column)]
        return items[: max(size, 0)]

    def _dev_cell(self, digits: int, ops: int, count: int) -> list[HeldOutItem]:
        reserved = set(
            _distinct_expressions(
                random.Random(f"arith-heldout:{self.eval_seed}:{digits}:{ops}"),
                digits,
                ops,
                max(self.eval_per_cell, DEV_RESERVED),
            )
        )
        rng = random.Random(f"arith-dev:{self.eval_seed}:{digits}:{ops}")
        texts = [t for t in _distinct_expressions(rng, digits, ops, count + len(reserved)) if t not in reserved]
        return [HeldOutItem(t, float(evaluate_expression(t)), group=f"d{digits}o{ops}") for t in texts[:count]]

    def _cell(self, digits: int, ops: int) -> list[HeldOutItem]:
        rng = random.Random(f"arith-heldout:{self.eval_seed}:{digits}:{ops}")
        items: dict[str, HeldOutItem] = {}
        for _ in range(200 * self.eval_per_cell):
            if len(items) == self.eval_per_cell:
                break
            text = random_expression(rng, digits, ops)
            if text not in items:
                items[text] = HeldOutItem(text, float(evaluate_expression(text)), group=f"d{digits}o{ops}")
        if len(items) < self.eval_per_cell:
            raise ValueError(
                f"arith task: only {len(items)} distinct problems with {digits} digit(s) and "
                f"{ops} operator(s); lower eval_per_cell (got {self.eval_per_cell})"
            )
        return list(items.values())


DEV_RESERVED = 100
"""Problems per cell of the held-out stream that the dev set never uses, so it stays disjoint
from re-evaluations on larger grids (``eval_per_cell`` up to 100)."""


def _distinct_expressions(rng: random.Random, digits: int, ops: int, count: int) -> list[str]:
    """Up to ``count`` distinct :func:`random_expression` texts in draw order (fewer when the cell
    holds fewer: 200 draws per wanted problem at most)."""
    seen: dict[str, None] = {}
    for _ in range(200 * count):
        if len(seen) == count:
            break
        seen.setdefault(random_expression(rng, digits, ops))
    return list(seen)
