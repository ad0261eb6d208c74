"""The text of a gsm proposal: the format the teacher is asked for, the labels it adds around its
program, and the number a program prints. Pure string functions, linear time."""

from __future__ import annotations

import re

from evolora.tasks.numeric import json_number, parse_exact

# Linear-time patterns: no two adjacent quantifiers can match the same characters (a run
# of spaces or newlines is consumed by one of them only), so a failed match backtracks
# over each run once.
_PROBLEM_HEADER = re.compile(r"(?:^|\n)(?:[#*]|[^\S\n])*(?:new\s+)?problem\s*(?:\d+\s*)?(?:\*+\s*)?:\**", re.IGNORECASE)
_LABEL = re.compile(r"(?:program|python|code|solution|answer)(?:\s*(?:program|code))?", re.IGNORECASE)
_LABEL_JUNK = "#* \t\n\r\f\v"


def _drop_trailing_label(problem: str) -> str:
    """``problem`` without a last line that only labels the code after it ("**Program:**",
    "Python code:"), and without the markup before that line. Linear time."""
    stripped = problem.rstrip(_LABEL_JUNK + ":")
    cut = stripped.rfind("\n")
    if cut < 0 or not _LABEL.fullmatch(stripped[cut + 1 :].lstrip(_LABEL_JUNK)):
        return problem
    return stripped[:cut].rstrip(_LABEL_JUNK)


def format_proposal(problem: str, program: str) -> str:
    """The exact text format the teacher is asked to produce."""
    return f"Problem: {problem.strip()}\n```python\n{program.strip()}\n```"


def program_answer(output: str) -> float | int | None:
    """The number on the last non-empty line of a program's output, or None: a float, or
    an exact ``int`` for an integer beyond 2**53 (:func:`evolora.tasks.numeric.json_number`);
    None also for a non-integer beyond float range. Linear time.

    >>> program_answer("step 1\\n18\\n\\n"), program_answer("18 apples"), program_answer("3**41\\n" + str(3**41))
    (18.0, None, 36472996377170786403)
    """
    lines = [line for line in output.splitlines() if line.strip()]
    value = parse_exact(lines[-1]) if lines else None
    return None if value is None else json_number(value)
