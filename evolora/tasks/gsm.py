"""The ``gsm`` task: grade-school math word problems with a verifying program.

The teacher writes one word problem and a short Python program that prints its answer;
the sandbox runs the program (valid = refused by no check, exits cleanly twice with the
same output, and its last output line is a finite number: that number is the ground
truth); the student answers in words ending with "#### <number>"; the grade is numeric.
Held-out evaluation: GSM8K test (answer after "####").

Source: design notes §6; PopuLoRA (arXiv 2605.16727) §2 steps 2-3; GSM8K (arXiv 2110.14168).
"""

from __future__ import annotations

import ast
import json
import operator
import random
import re
import warnings
from pathlib import Path

from evolora.sandbox import SandboxPool
from evolora.tasks.pooled import PooledVerifier
from evolora.tasks.base import Grade, HeldOutItem, Message, Proposal, Verdict
from evolora.tasks.numeric import final_number, marked_number, numbers_equal, parse_number

EXAMPLES_PATH = Path(__file__).resolve().parent.parent / "data" / "gsm_examples.json"
"""Reference examples written for evolora: {"examples": [{"problem", "program", "answer"}]}."""

TEACHER_SYSTEM = "You write grade-school math word problems and Python programs that solve them."
TEACHER_INSTRUCTION = (
    "Write one new math word problem and a short Python program that prints its answer "
    "as a number. Use exactly this format:\n\n"
    "Problem: <the problem>\n```python\n<the program>\n```"
)
TEACHER_CLOSING = "Now write a new, different problem."
STUDENT_SYSTEM = "You are a careful math tutor."
STUDENT_INSTRUCTION = 'Solve it step by step, briefly. End with a line "#### <number>".'

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\r?\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_PROBLEM_HEADER = re.compile(r"(?:^|\n)[#*\s]*(?:new\s+)?problem\s*\d*\s*[*]*\s*:[*]*", re.IGNORECASE)
_TRAILING_LABEL = re.compile(
    r"\n[#*\s]*(?:program|python|code|solution|answer)\s*(?:program|code)?\s*[*]*\s*:?[*]*\s*\Z",
    re.IGNORECASE)
_CALCULATION = re.compile(r"<<([^=<>]+)=([^<>]+)>>")
_ARITHMETIC = re.compile(r"[\d\s+\-*/().]+")
MAX_EXAMPLE_CHARS = 250
"""GSM8K train questions longer than this are not used as examples (prompt tokens cost)."""


class GSMTask(PooledVerifier):
    """Grade-school math with program-verified answers (task name "gsm").

    The teacher's answer is forced to begin with ``"Problem:"`` (:attr:`proposal_prefix`).

    Args:
        train_path: GSM8K train jsonl ({"question", "answer"}, answer ending "#### N").
            When given, each teacher example comes from it with probability
            ``gsm8k_fraction`` (its program is rebuilt from the <<a*b=c>> calculator
            annotations); otherwise all examples are evolora's own
            (``evolora/data/gsm_examples.json``, 12 problems with real programs).
        eval_path: GSM8K test jsonl for :meth:`held_out`. None: try Hugging Face
            ``datasets`` (``openai/gsm8k``, split "test"), else no held-out data.
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
        tolerance: relative and absolute tolerance when comparing numbers.
    """

    name = "gsm"

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
    ) -> None:
        if num_examples < 0 or runs < 1 or workers < 1 or not 0.0 <= gsm8k_fraction <= 1.0:
            raise ValueError(
                f"gsm task: need num_examples >= 0 (got {num_examples}), runs >= 1 (got {runs}), "
                f"workers >= 1 (got {workers}), 0 <= gsm8k_fraction <= 1 (got {gsm8k_fraction})")
        if timeout_s <= 0 or memory_mb < 32 or output_limit < 1 or tolerance < 0:
            raise ValueError(
                f"gsm task: need timeout_s > 0 (got {timeout_s}), memory_mb >= 32 (got {memory_mb}), "
                f"output_limit >= 1 (got {output_limit}), tolerance >= 0 (got {tolerance})")
        for key, path in (("eval_path", eval_path), ("train_path", train_path)):
            if path is not None and not Path(path).is_file():
                raise FileNotFoundError(
                    f"gsm task: {key} {path!r} is not a file; give a GSM8K .jsonl path "
                    f"(--set task.params.{key}=PATH) or null")
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
        self.examples: list[dict] = _load_examples(EXAMPLES_PATH)
        self._train: list[dict] | None = _load_train(Path(train_path)) if train_path else None
        self._eval: list[HeldOutItem] | None = None
        self._pool: SandboxPool | None = None

    # ------------------------------------------------------------------ teacher side
    def proposal_prompt(self, rng: random.Random) -> list[Message]:
        """System + one user message: the format, ``num_examples`` examples, a request."""
        parts = [TEACHER_INSTRUCTION]
        if self.num_examples:
            parts.append("Examples:")
            for example in self._draw_examples(rng):
                parts.append(format_proposal(example["problem"], example["program"]))
        parts.append(TEACHER_CLOSING)
        return [{"role": "system", "content": TEACHER_SYSTEM},
                {"role": "user", "content": "\n\n".join(parts)}]

    def _draw_examples(self, rng: random.Random) -> list[dict]:
        own = rng.sample(self.examples, min(self.num_examples, len(self.examples)))
        if not self._train:
            return own
        return [rng.choice(self._train) if rng.random() < self.gsm8k_fraction else example
                for example in own]

    def parse_proposal(self, text: str) -> Proposal | None:
        """Problem text (an optional "Problem:" header) followed by a code fence.

        Tolerates a fence without a language tag or without its closing backticks, text
        after the program, Markdown bold headers and a "Program:" label before the fence.
        Returns None when there is no fence, no problem text (>= 3 words, no code), an
        empty program, or either part is longer than its limit.
        """
        fence = _FENCE.search(text)
        if fence is None:
            return None
        program = fence.group(1).strip("\n").rstrip()
        before = text[: fence.start()]
        headers = list(_PROBLEM_HEADER.finditer(before))
        problem = before[headers[-1].end():] if headers else before
        problem = _TRAILING_LABEL.sub("", problem).strip().strip("*").strip()
        if (not program.strip() or len(problem.split()) < 3 or "```" in problem
                or "print(" in problem or len(problem) > self.max_problem_chars
                or len(program) > self.max_program_chars):
            return None
        return Proposal(problem=problem, program=program, raw=text)

    def verify(self, proposals: list[Proposal | None]) -> list[Verdict]:
        """Run every program ``runs`` times (all in parallel) and decide validity.

        A None entry (a completion ``parse_proposal`` rejected) gets reason "parse", so
        callers can pass ``[task.parse_proposal(t) for t in texts]`` unchanged. Reasons:
        "parse", "banned", "timeout", "memory", "error", "output_limit" (the first failing
        run's sandbox status), "nondeterministic" (outputs differ), "not_numeric" (the
        last non-empty output line is not a finite number), "ok". ``seconds`` is the
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
                answer = program_answer(runs[0].output)
                verdicts.append(Verdict(answer is not None, answer,
                                        "ok" if answer is not None else "not_numeric", seconds))
        return verdicts

    # ------------------------------------------------------------------ student side
    def solve_prompt(self, problem: str) -> list[Message]:
        return [{"role": "system", "content": STUDENT_SYSTEM},
                {"role": "user", "content": f"{problem.strip()}\n\n{STUDENT_INSTRUCTION}"}]

    def grade(self, completion: str, answer: float) -> Grade:
        """"correct"/"wrong" by numeric comparison, "format" when no final number is found."""
        predicted = marked_number(completion) if self.require_marker else final_number(completion)
        if predicted is None:
            return Grade("format", None)
        correct = numbers_equal(predicted, answer, rel=self.tolerance, abs=self.tolerance)
        return Grade("correct" if correct else "wrong", predicted)

    # ------------------------------------------------------------------ evaluation
    def held_out(self, limit: int, rng: random.Random) -> list[HeldOutItem] | None:
        """The first ``limit`` GSM8K test problems in file order (deterministic; ``rng``
        is unused), from ``eval_path`` or Hugging Face ``datasets``; None with a warning
        when neither is available.

        Raises:
            FileNotFoundError: ``eval_path`` is given but does not exist.
            ValueError: ``eval_path`` has a malformed line.
        """
        if self._eval is None:
            if self.eval_path is not None:
                self._eval = load_gsm8k(Path(self.eval_path))
            else:
                self._eval = _load_gsm8k_from_hub()
                if self._eval is None:
                    warnings.warn("gsm task: no held-out data (set task.params.eval_path to a GSM8K "
                                  "test.jsonl, or install `datasets` with network access)",
                                  stacklevel=2)
                    return None
        return self._eval[: max(limit, 0)]


def format_proposal(problem: str, program: str) -> str:
    """The exact text format the teacher is asked to produce."""
    return f"Problem: {problem.strip()}\n```python\n{program.strip()}\n```"


def program_answer(output: str) -> float | None:
    """The number on the last non-empty line of a program's output, or None.

    >>> program_answer("step 1\\n18\\n\\n"), program_answer("18 apples")
    (18.0, None)
    """
    lines = [line for line in output.splitlines() if line.strip()]
    return parse_number(lines[-1]) if lines else None


def _load_examples(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)["examples"]


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(
            f"gsm task: GSM8K file {str(path)!r} does not exist; set the path to a GSM8K "
            f"jsonl (lines of {{\"question\", \"answer\"}}) or leave it unset")
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"gsm task: {path}:{number} is not valid JSON ({exc}); "
                                 f"expected one GSM8K record per line") from exc
            if not (isinstance(row, dict) and isinstance(row.get("question"), str)
                    and isinstance(row.get("answer"), str)):
                raise ValueError(f"gsm task: {path}:{number} needs string fields 'question' "
                                 f"and 'answer' (GSM8K format)")
            rows.append(row)
    return rows


def _final_answer(answer: str) -> float | None:
    return marked_number(answer) if "####" in answer else None


def load_gsm8k(path: Path) -> list[HeldOutItem]:
    """GSM8K jsonl → items; every answer must end with "#### <number>"."""
    items = []
    for number, row in enumerate(_read_jsonl(path), start=1):
        value = _final_answer(row["answer"])
        if value is None:
            raise ValueError(f"gsm task: record {number} of {path} has no '#### <number>' "
                             f"final answer; is this a GSM8K file?")
        items.append(HeldOutItem(question=row["question"], answer=value))
    return items


def _program_from_calculations(answer: str) -> str | None:
    """Rebuild a program from GSM8K's <<expr=result>> annotations; None when unusable.

    Numbers equal to an earlier step's result become that step's variable, so the program
    computes step by step; the program's value must equal the "####" answer.

    >>> print(_program_from_calculations("<<16-3-4=9>>9 eggs, <<9*2=18>>18 dollars\\n#### 18"))
    step1 = 16-3-4
    step2 = step1*2
    print(step2)
    """
    final = _final_answer(answer)
    steps = _CALCULATION.findall(answer)
    if final is None or not steps or any(not _ARITHMETIC.fullmatch(e) for e, _ in steps):
        return None
    names: dict[str, str] = {}  # annotated result text -> step variable
    values: dict[str, float] = {}  # step variable -> value
    lines = []
    for i, (expr, result) in enumerate(steps, start=1):
        expr = re.sub(r"\d+(?:\.\d+)?", lambda m: names.get(m.group(0), m.group(0)),
                      expr.strip().replace(" ", ""))
        value = _arithmetic_value(expr, values)
        if value is None:
            return None
        lines.append(f"step{i} = {expr}")
        names[result.strip()] = f"step{i}"
        values[f"step{i}"] = value
    if not numbers_equal(value, final):
        return None
    return "\n".join([*lines, f"print(step{len(steps)})"])


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
              ast.Div: operator.truediv}


def _arithmetic_value(expr: str, variables: dict[str, float]) -> float | None:
    """Evaluate + - * / ( ) over numbers and known variables without ``eval``; None on error.

    >>> _arithmetic_value("step1*2+1", {"step1": 9.0}), _arithmetic_value("1/0", {})
    (19.0, None)
    """
    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in variables:
            return variables[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"unsupported expression node {type(node).__name__}")

    try:
        return walk(ast.parse(expr, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None


def _load_train(path: Path) -> list[dict]:
    examples = []
    for row in _read_jsonl(path):
        program = _program_from_calculations(row["answer"])
        if program is not None and len(row["question"]) <= MAX_EXAMPLE_CHARS:
            examples.append({"problem": row["question"], "program": program})
    if not examples:
        raise ValueError(f"gsm task: no usable GSM8K problems in {path} (answers need "
                         f"<<a*b=c>> annotations and a '#### <number>' line)")
    return examples


def _load_gsm8k_from_hub() -> list[HeldOutItem] | None:
    try:
        import datasets  # optional extra: pip install evolora[data]
    except ImportError:
        return None
    try:
        rows = datasets.load_dataset("openai/gsm8k", "main", split="test")
    except Exception:  # offline, no cache, hub errors: held-out evaluation is optional
        return None
    items = [HeldOutItem(r["question"], v) for r in rows
             if (v := _final_answer(r["answer"])) is not None]
    return items or None

