"""Seed problems for the gsm teacher: GSM8K train problems whose program is a function of their
stated quantities, so a teacher varies the quantities and the truth follows from the program.

A seed is a GSM8K train problem with its program rebuilt from the calculator annotations
(:func:`evolora.tasks.gsm.data._program_from_calculations`) and rewritten as a function of the
numbers the problem states, in the order it states them::

    def answer(a):           # "Natalia sold clips to 48 of her friends in April, and then
        step1 = a/2          #  she sold half as many clips in May. How many clips ..."
        step2 = a+step1
        return step2
    print(answer(48))

A proposal keeps the function (the same operations) and calls it with new numbers; the teacher
writes a problem that states them (``seeded``), or the seed's own text carries them (``numbers``:
GSM-Symbolic's templates, arXiv 2410.05229). The checks here tie the proposal to its seed:
:func:`seed_reasons`.

Source: GSM8K (Cobbe et al. 2021, arXiv 2110.14168), MIT license (``evolora/data/GSM8K_LICENSE``);
PopuLoRA (arXiv 2605.16727) §2 step 2; the seeded proposal is evolora's own.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from evolora.parsing import PARSE_ERRORS
from evolora.tasks.gsm.data import _arithmetic_value
from evolora.tasks.gsm.grounding import (
    _NUMBER,
    ALLOWED_CONSTANTS,
    NUMBER_WORDS,
    UNIT_CONSTANTS,
    grounding_reasons,
    stated_quantities,
)

SEEDS_PATH = Path(__file__).resolve().parents[2] / "data" / "gsm_seeds.json"
"""The seed slice shipped in the package: {"seeds": [{"problem", "function", "values"}]}."""
PARAMS = "abcdefgh"
"""Parameter names of a seed's function, in the order the problem states the quantities."""
CUES = (
    "more",
    "less",
    "fewer",
    "times",
    "twice",
    "half",
    "each",
    "per",
    "every",
    "total",
    "left",
    "remain",
    "altogether",
    "percent",
    "%",
    "than",
    "double",
    "triple",
    "quarter",
    "third",
    "average",
    "share",
    "split",
    "divide",
    "equally",
    "lose",
    "lost",
    "spend",
    "spent",
    "give",
    "gave",
    "sold",
    "buy",
    "bought",
    "earn",
    "save",
    "cost",
    "change",
)
"""Relation words whose presence a varied problem must keep: a seed with "half as many" varied
into "twice as many" keeps the program but changes the question."""
_CALL = re.compile(r"print\(answer\(([^()\n]*)\)\)")
_WORD = re.compile(r"[a-z%]+")


@dataclass(frozen=True)
class Seed:
    """One seed problem.

    Attributes:
        problem: the GSM8K question.
        function: ``def answer(a, b, ...): ... return stepN`` (the rebuilt program over the stated
            quantities; the parameters follow the order of the problem's numbers).
        values: the stated numbers, in order (the seed's own call).
    """

    problem: str
    function: str
    values: tuple[float, ...]

    @property
    def program(self) -> str:
        """The seed's full program: the function and its own call."""
        return f"{self.function}\nprint(answer({', '.join(number_literal(v) for v in self.values)}))"

    def template(self) -> str:
        """The problem with each stated number replaced by ``{a}``, ``{b}``, ... in order."""
        names = iter(PARAMS)
        return _NUMBER.sub(lambda m: "{" + next(names) + "}", self.problem.replace("{", "(").replace("}", ")"))


def number_literal(value: float | int | Fraction) -> str:
    """A number as a program literal: ``3`` not ``3.0``; ``0.25``.

    >>> number_literal(3.0), number_literal(Fraction(1, 4))
    ('3', '0.25')
    """
    value = Fraction(str(value)) if not isinstance(value, Fraction) else value
    return str(value.numerator) if value.denominator == 1 else repr(float(value))


def seed_from_program(question: str, program: str, answer: float) -> Seed | None:
    """The seed of a GSM8K train problem and its rebuilt program, or None when the program is not
    surely a function of the stated numbers: a literal that is neither a stated number (each stated
    number distinct) nor explained by the grounding rules, a stated number unused, a rule broken, a
    stated number that a literal could also mean implicitly (2 and "half"; 60 and "hours"), or a step
    that no later step uses (an annotation is missing: the program is not the whole solution)."""
    if grounding_reasons(question, program, answer):
        return None
    stated = [v for v, _ in stated_quantities(question)]
    if not 1 <= len(stated) <= len(PARAMS) or len(set(stated)) != len(stated) or any(v <= 0 for v in stated):
        return None
    if set(stated) & _implicit_values(question):  # a literal 2 could be the stated 2 or "half"
        return None
    names = {v: PARAMS[i] for i, v in enumerate(stated)}
    tree = ast.parse(program)
    used: set[str] = set()

    class Rename(ast.NodeTransformer):
        def visit_Constant(self, node: ast.Constant) -> ast.AST:
            if type(node.value) in (int, float) and Fraction(str(node.value)) in names:
                used.add(names[Fraction(str(node.value))])
                return ast.copy_location(ast.Name(id=names[Fraction(str(node.value))], ctx=ast.Load()), node)
            return node

    body = [ast.unparse(Rename().visit(statement)) for statement in tree.body]
    if len(used) != len(stated) or not body[-1].startswith("print(") or not body[-1].endswith(")"):
        return None
    steps = [line.split(" = ", 1)[0] for line in body[:-1]]
    if any(not re.search(rf"\b{step}\b", " ".join(body[k + 1 :])) for k, step in enumerate(steps)):
        return None  # a step no later line uses: an annotation is missing, the program is not the solution
    lines = [
        f"def answer({', '.join(PARAMS[: len(stated)])}):",
        *(f"    {line}" for line in body[:-1]),
        f"    return {body[-1][len('print(') : -1]}",
    ]
    return Seed(problem=question, function="\n".join(lines), values=tuple(float(v) for v in stated))


def function_value(function: str, args: list[float]) -> float | None:
    """The value of a seed's ``answer`` function on ``args``, by the arithmetic-only evaluator of
    :mod:`evolora.tasks.gsm.data` (no ``exec``); None on division by zero or a malformed line.

    >>> function_value("def answer(a):\\n    step1 = a / 2\\n    return a + step1", [48])
    72.0
    """
    variables = dict(zip(PARAMS, map(float, args)))
    for line in function.splitlines()[1:]:
        target, _, expr = (
            line.strip().partition(" = ")
            if not line.strip().startswith("return ")
            else ("", "", line.strip()[len("return ") :])
        )
        value = _arithmetic_value(expr, variables)
        if value is None:
            return None
        if not target:
            return value
        variables[target] = value
    return None


def _implicit_values(question: str) -> set[Fraction]:
    """Values a program literal may stand for without a digit in the text: the grounding rules'
    allowed constants, number words and unit constants whose cue the text has."""
    text = question.lower()
    words = {NUMBER_WORDS[w] for w in re.findall(r"[a-z]+", text) if w in NUMBER_WORDS}
    units = {v for v, cue_words in UNIT_CONSTANTS.items() if any(c in text for c in cue_words)}
    return set(ALLOWED_CONSTANTS) | words | units


SIMPLE_PATH = Path(__file__).resolve().parents[2] / "data" / "gsm_simple_examples.json"
"""evolora's own one- and two-step problems (``example_set: simple``); 13 of the 16 are seeds."""


def simple_seeds(path: Path = SIMPLE_PATH) -> list[Seed]:
    """The seeds among evolora's simple examples ("A box holds 6 eggs. How many eggs are in 4
    boxes?"): problems a 135M student sometimes solves, where GSM8K's rarely are."""
    with open(path, encoding="utf-8") as f:
        examples = json.load(f)["examples"]
    # true division: "22 students in 3 equal rows" must read 7.33 (whole_count rejects it), not 7
    return [
        s
        for e in examples
        if (s := seed_from_program(e["problem"], e["program"].replace("//", "/"), e["answer"])) is not None
    ]


def load_seeds(path: Path = SEEDS_PATH) -> list[Seed]:
    """The seed slice (:data:`SEEDS_PATH`).

    Raises:
        FileNotFoundError: the package was installed without its data files.
    """
    with open(path, encoding="utf-8") as f:
        return [Seed(s["problem"], s["function"], tuple(s["values"])) for s in json.load(f)["seeds"]]


def split_program(program: str) -> tuple[str, list[Fraction]] | None:
    """(function, call arguments) of a seeded program ``def answer(...): ... print(answer(x, y))``
    (a comment after the call is ignored); None when the last line is not one call of ``answer`` on
    non-negative number literals."""
    function, _, call = program.rstrip().rpartition("\n")
    match = _CALL.fullmatch(call.split("#", 1)[0].strip())  # a trailing comment ("# Output: 6") is dropped
    if not function.startswith("def answer(") or match is None:
        return None
    try:
        args = ast.parse(f"({match.group(1)},)", mode="eval").body.elts if match.group(1).strip() else []
    except PARSE_ERRORS:
        return None
    if not args or not all(
        isinstance(a, ast.Constant) and type(a.value) in (int, float) and a.value >= 0 for a in args
    ):
        return None
    return function, [Fraction(str(a.value)) for a in args]


def cues(text: str) -> set[str]:
    """The :data:`CUES` and number words (``half``, ``dozen``) present in ``text``."""
    words = _WORD.findall(text.lower())
    return {c for c in CUES if any(w.startswith(c) for w in words)} | {w for w in words if w in NUMBER_WORDS}


def seed_reasons(
    problem: str, program: str, seeds: dict[str, list[Seed]], answer: float | int | None = None
) -> list[str]:
    """Why a seeded proposal does not vary a seed faithfully; [] when it does.

    Args:
        problem: the proposal's text; program: its program (function + call).
        seeds: the task's seeds by function text.
        answer: the number the program printed (None: not checked).

    Returns:
        ``structure`` (the function is no seed's, or the call's arity differs), ``quantity_order``
        (the problem's numbers, in order, are not the call's arguments), ``cues`` (the relation
        words or number words differ from every seed with this function), ``copied_seed`` (the
        arguments are a seed's own numbers), ``not_positive`` (the answer is not > 0, as every GSM8K
        answer is: "Lucy gives Linda $26 ... Lucy had $1" leaves Linda -51 dollars; a fractional count
        is the grounding rule ``whole_count``'s, a fractional sum of money is fine).
    """
    parts = split_program(program)
    if parts is None or parts[0] not in seeds:
        return ["structure"]
    function, args = parts
    candidates = seeds[function]
    if len(args) != len(candidates[0].values):
        return ["structure"]
    reasons = []
    if [v for v, _ in stated_quantities(problem)] != args:
        reasons.append("quantity_order")
    if all(cues(problem) != cues(s.problem) for s in candidates):
        reasons.append("cues")
    if any(args == [Fraction(str(v)) for v in s.values] for s in candidates):
        reasons.append("copied_seed")
    if answer is not None and not answer > 0:
        reasons.append("not_positive")
    return reasons
