"""Text formats of the ``code`` task: proposals, student prompts, answers, harnesses.

Pure string and :mod:`ast` work, no execution. A proposal is written (and stored as
``Proposal.problem``) in one format: the type tag, then the inputs, so that a small model
commits to them before the program (the task forces the answer to start with
``Task: <the drawn type>`` and ``Input:``)::

    Task: induction
    Input: [1, 2, 3]
    Input: [4]
    Message: Add the numbers.
    ```python
    def f(numbers):
        return sum(numbers)
    ```

The tag names one of the task types of Absolute Zero Reasoner: deduction (the student
sees f and the input, predicts the output), abduction (sees f and the output, gives an
input), induction (sees input/output pairs and the message, writes f). A proposal without
a tag gets its type from its content (:func:`parse_code_problem`). An ``Input:`` line holds
the arguments of ``f`` as Python literals (``[1, 2], 3`` is the call ``f([1, 2], 3)``);
values are compared as Python values (``ast.literal_eval``), never as loose strings.

Source: Absolute Zero Reasoner (arXiv 2505.03335) §3 (task types, verification);
PopuLoRA (arXiv 2605.16727) §2 steps 2-3.
"""

from __future__ import annotations

import ast
import re
import zlib
from dataclasses import dataclass
from typing import Literal

from evolora.parsing import FENCE, PARSE_ERRORS
from evolora.tasks.code.values import arguments_text, parse_arguments

CodeType = Literal["deduction", "abduction", "induction"]
CODE_TYPES: tuple[CodeType, ...] = ("deduction", "abduction", "induction")

TEACHER_SYSTEM = "You write short Python functions and test inputs for them."
TEACHER_TASKS = {
    "deduction": "A student will see f and the input and must predict the output.",
    "abduction": "A student will see f and its output and must find an input that gives it.",
    "induction": "A student will see the inputs with their outputs and the message, and must write f.",
}
TEACHER_FORMATS = {
    "deduction": "Write the line Task: deduction, then one line Input: <the arguments of f>, then one new "
    "short Python function named f in a ```python block.",
    "abduction": "Write the line Task: abduction, then one line Input: <the arguments of f>, then one new "
    "short Python function named f in a ```python block.",
    "induction": "Write the line Task: induction, then {count} lines Input: <the arguments of f> with different "
    "inputs, one line Message: <a hint at what f does>, then one new short Python function named f "
    "in a ```python block.",
}
TEACHER_CLOSING = "Now write a new, different function. Use exactly the format of the examples."
STUDENT_SYSTEM = "You are an expert Python programmer."

EXAMPLES: tuple[dict, ...] = (
    {
        "program": "def f(numbers):\n    total = 0\n    for n in numbers:\n        if n % 2 == 0:\n"
        "            total += n\n    return total",
        "inputs": ("[1, 2, 3, 4]", "[5, 6]", "[]", "[10, 3, 8]", "[7]", "[2, 2]"),
        "message": "Add up the even numbers.",
    },
    {
        "program": "def f(s):\n    return s[::-1]",
        "inputs": ("'abc'", "'hello'", "''", "'ab'", "'level'", "'xyz'"),
        "message": "Reverse the string.",
    },
    {
        "program": "def f(a, b):\n    return a * b + 1",
        "inputs": ("2, 3", "0, 5", "4, 4", "-1, 7", "10, 2", "3, -3"),
        "message": "Multiply, then add one.",
    },
    {
        "program": "def f(words):\n    return [w.upper() for w in words if len(w) > 2]",
        "inputs": ("['hi', 'cat', 'dog']", "['a', 'tree']", "[]", "['sun', 'x']", "['ox']", "['bee', 'ant']"),
        "message": "Upper-case the words longer than two letters.",
    },
    {
        "program": "def f(n):\n    result = 1\n    for i in range(1, n + 1):\n        result *= i\n    return result",
        "inputs": ("3", "0", "5", "1", "4", "6"),
        "message": "Multiply all numbers from 1 to n.",
    },
    {
        "program": "def f(text):\n    counts = {}\n    for ch in text:\n        counts[ch] = counts.get(ch, 0) + 1\n"
        "    return counts",
        "inputs": ("'aab'", "'xyz'", "'b'", "'abab'", "''", "'zz'"),
        "message": "Count each character.",
    },
    {
        "program": "def f(x):\n    if x > 10:\n        return x - 10\n    return x * 2",
        "inputs": ("15", "3", "10", "-2", "11", "0"),
        "message": "Big numbers lose ten, the others double.",
    },
    {
        "program": "def f(items):\n    return sorted(set(items))",
        "inputs": ("[3, 1, 3, 2]", "[5, 5]", "[]", "[9, -1, 0]", "[2]", "[4, 3, 4]"),
        "message": "The distinct items in order.",
    },
    {
        "program": "def f(s, k):\n    return s[k:] + s[:k]",
        "inputs": ("'abcdef', 2", "'hello', 1", "'xy', 0", "'rotate', 3", "'abc', 3", "'loop', 2"),
        "message": "Rotate the string left by k.",
    },
    {
        "program": "def f(nums):\n    best = nums[0]\n    for n in nums:\n        if n > best:\n            best = n\n"
        "    return best",
        "inputs": ("[3, 9, 2]", "[-5, -1]", "[7]", "[0, 0, 4]", "[1, 2, 3]", "[8, 8]"),
        "message": "The largest number.",
    },
)
"""Reference proposals written for evolora (program, six distinct inputs, a message);
deduction and abduction examples use the first input only, induction ones the first few."""

_TYPE = re.compile(r"\b(deduction|abduction|induction)\b", re.IGNORECASE)
_FIELD = re.compile(r"^[\s>*#-]*(input|message|task)\s*\d*\s*[*]*\s*:[*]*\s*(.*)$", re.IGNORECASE)


# ---------------------------------------------------------------------------- proposals
@dataclass(frozen=True)
class CodeProblem:
    """A parsed ``code`` proposal.

    Attributes:
        kind: "deduction", "abduction" or "induction".
        program: the source defining ``f``.
        inputs: canonical argument texts (:func:`arguments_text`); one for deduction and
            abduction, several for induction.
        message: the teacher's one-line hint (induction; "" when none).
    """

    kind: CodeType
    program: str
    inputs: tuple[str, ...]
    message: str = ""

    def text(self) -> str:
        """The canonical proposal text (also ``Proposal.problem``); :func:`parse_code_problem` reads it back."""
        return format_proposal(self.kind, self.program, self.inputs, self.message)


def format_proposal(kind: str, program: str, inputs, message: str = "") -> str:
    """The exact text format the teacher is asked to produce (see the module docstring)."""
    lines = [f"Task: {kind}"] + [f"Input: {i}" for i in inputs]
    if message:
        lines.append(f"Message: {message}")
    lines.append(f"```python\n{program.strip()}\n```")
    return "\n".join(lines)


def parse_code_problem(
    text: str,
    *,
    type_weights: dict[str, float] | None = None,
    min_inputs: int = 3,
    max_inputs: int = 6,
    max_program_chars: int = 1500,
    max_input_chars: int = 200,
    max_message_chars: int = 200,
) -> CodeProblem | None:
    """Parse a teacher completion (or a canonical problem text) into a :class:`CodeProblem`.

    The program is the first code fence (a missing closing fence is tolerated). ``Input:``
    and ``Message:`` lines come before it (else after it, up to a ``Task: <type>`` line,
    the next fence, or the end); other lines (``Output:``, prose) are ignored: outputs come
    from the executor. Without ``Input:`` lines, top-level calls ``f(...)`` /
    ``print(f(...))`` with literal arguments at the end of the program are the inputs (and
    are removed from it).

    The type is that of the first ``Task: <type>`` line. Untagged
    proposals get one from their content: ``min_inputs`` or more inputs make induction;
    otherwise deduction or abduction, picked by a stable hash of the program with
    ``type_weights`` (so every later parse agrees). Deduction and abduction keep the first
    input, induction the first ``max_inputs``.

    Returns:
        None when the fence or the inputs are missing, an input is not a tuple of literals,
        a part exceeds its length limit, or the type has weight 0 in ``type_weights``.
    """
    weights = dict.fromkeys(CODE_TYPES, 1.0) if type_weights is None else type_weights
    fence = FENCE.search(text)
    if fence is None:
        return None
    program = fence.group(1).strip("\n").rstrip()
    before, after = text[: fence.start()].splitlines(), text[fence.end() :].splitlines()
    inputs: list[str] = []
    message, kind = "", None
    for part, lines in (("before", before), ("after", after)):
        found: list[str] = []
        for line in lines:
            if part == "after" and "```" in line:
                break
            field = _FIELD.match(line)
            if field is None:
                continue
            name, value = field.group(1).lower(), field.group(2).strip()
            if name == "task":
                tag = _TYPE.search(value)
                kind = kind or (tag.group(1).lower() if tag else None)
                if part == "after":
                    break
            elif name == "message":
                message = message or value.strip("*` ")
            elif not inputs:
                arguments = parse_arguments(value) if len(value) <= max_input_chars else None
                if arguments is None:
                    return None
                found.append(arguments_text(arguments))
        inputs = inputs or found
    if not inputs:
        program, inputs = split_calls(program)
    if kind is None:
        kind = (
            "induction"
            if len(inputs) >= min_inputs and weights.get("induction", 0) > 0
            else _hashed_kind(program, weights)
        )
    needed, kept = (min_inputs, max_inputs) if kind == "induction" else (1, 1)
    if (
        kind is None
        or weights.get(kind, 0) <= 0
        or not program.strip()
        or len(program) > max_program_chars
        or len(inputs) < needed
        or len(message) > max_message_chars
        or any(len(i) > max_input_chars for i in inputs)
    ):
        return None
    return CodeProblem(kind, program, tuple(inputs[:kept]), message if kind == "induction" else "")


def _hashed_kind(program: str, weights: dict[str, float]) -> str | None:
    """Deduction or abduction, drawn by a stable hash of ``program`` with their weights."""
    total = weights.get("deduction", 0) + weights.get("abduction", 0)
    if total <= 0:
        return None
    draw = zlib.crc32(program.encode("utf-8", "replace")) / 2**32 * total
    return "deduction" if draw < weights.get("deduction", 0) else "abduction"


def split_calls(program: str) -> tuple[str, list[str]]:
    """Move the trailing top-level calls of ``f`` out of a program: (program, inputs).

    Calls are ``f(...)`` or ``print(f(...))`` statements whose arguments are literals (no
    keywords); the inputs are their canonical argument texts. A program that does not
    parse is returned unchanged with no inputs.

    >>> split_calls("def f(x):\\n    return x\\n\\nprint(f(3))\\nf('a')")
    ('def f(x):\\n    return x', ['3', "'a'"])
    """
    try:
        tree = ast.parse(program)
    except PARSE_ERRORS:
        return program, []
    inputs: list[str] = []
    first_line = None
    for node in reversed(tree.body):
        call = node.value if isinstance(node, ast.Expr) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "print"
            and len(call.args) == 1
            and not call.keywords
        ):
            call = call.args[0]
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == "f"
            and call.args
            and not call.keywords
        ):
            break
        try:
            arguments = tuple(ast.literal_eval(a) for a in call.args)
        except (*PARSE_ERRORS, TypeError):
            break
        inputs.insert(0, arguments_text(arguments))
        first_line = node.lineno
    if first_line is None:
        return program, []
    return "\n".join(program.splitlines()[: first_line - 1]).rstrip(), inputs


# ---------------------------------------------------------------------------- student prompts
def student_prompt(kind: str, program: str, inputs: list[str], outputs: list[str], message: str, visible: int) -> str:
    """The student's user message for one problem.

    Args:
        kind: the task type.
        program, inputs, outputs: the verified problem (outputs are reprs).
        message: the induction hint ("" for none).
        visible: how many input/output pairs an induction student sees (the first ones).
    """
    code = f"```python\n{program.strip()}\n```"
    if kind == "deduction":
        return f"{code}\nWhat does f({inputs[0]}) return?\nAnswer with one line: Output: <the Python value>"
    if kind == "abduction":
        return (
            f"{code}\nFind arguments for f so that it returns {outputs[0]}.\n"
            f"Answer with one line: Input: <the arguments of f>"
        )
    pairs = "\n".join(f"f({i}) == {o}" for i, o in zip(inputs[:visible], outputs[:visible]))
    hint = f"\nHint: {message}" if message else ""
    return (
        f"Write a Python function f that gives these results:\n{pairs}{hint}\n"
        f"Answer with the function in a ```python code block."
    )
