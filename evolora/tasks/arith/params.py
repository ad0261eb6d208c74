"""The settings of the ``arith`` task as a frozen dataclass: every out-of-range value is refused
with the rule it breaks and the key to set, before any model loads."""

from __future__ import annotations

import re
from dataclasses import dataclass

from evolora.tasks.arith.evaluate import LIMITS
from evolora.tasks.arith.prompts import EXAMPLES, STUDENT_INSTRUCTION


@dataclass(frozen=True)
class ArithParams:
    """The settings of the ``arith`` task (``task.params`` in YAML), checked when built.

    Args:
        num_examples: few-shot examples in the teacher prompt, in [0, 10].
        max_chars: longest accepted expression, characters (>= 3).
        max_digits: most digits per number (>= 1).
        max_depth: deepest operator nesting, a number being 0 (>= 1).
        max_ops: most binary operators (>= 1); a problem needs at least one.
        max_value: bound on the magnitude of every value (>= 10; keep <= 2**53 so answers
            stay exact as floats).
        max_exponent: largest exponent of ``**`` (>= 0; 0 allows only ``x ** 0``).
        integer_only: valid problems must have an integer value (else "not_integer").
        eval_seed: seed of the held-out grid.
        eval_digits: digits per number in the grid, largest (cells 1..eval_digits), in [1, 6].
        eval_ops: binary operators per problem in the grid, largest (cells 1..eval_ops), in [1, 6].
        eval_per_cell: problems per (digits, operators) cell (>= 1).
        eval_cells: the grid's cells as ``"d<digits>o<operators>"`` names (e.g. ``["d1o1", "d2o1"]``:
            the cells where the members of a short 135M run differ, docs/results/evolution.md);
            None: every cell of ``eval_digits`` × ``eval_ops``. The dev set follows the same cells.
        tolerance: relative and absolute tolerance when grading a non-integer answer
            (integer answers compare exactly).
        lenient_parse: keep the longest arithmetic span of a line that also holds words
            (else such a line goes to the verifier as is and is refused as "banned").
        examples: "fixed" draws the teacher's examples from :data:`~evolora.tasks.arith.prompts.EXAMPLES`; "random" builds
            each one with :func:`~evolora.tasks.arith.text.random_expression` (digits 1..example_digits, operators
            1..example_ops, never a held-out grid problem), so copying an example is no
            longer a way to the same few problems.
        example_digits, example_ops: size of random examples, each in [1, 6].
        student_instruction: the sentence after "What is <problem>?" in the student prompt
            (non-empty; default :data:`~evolora.tasks.arith.prompts.STUDENT_INSTRUCTION`). Held-out prompts use it too.
        reference: the worked answer of ``selfplay.guidance``: "steps" (one operation at a
            time) or "answer" (``problem = value``), see :meth:`~evolora.tasks.arith.task.ArithTask.reference_solution`.

    Raises:
        ValueError: a value out of its range (the message names the key and the rule).
    """

    num_examples: int = 3
    max_chars: int = LIMITS["max_chars"]
    max_digits: int = LIMITS["max_digits"]
    max_depth: int = LIMITS["max_depth"]
    max_ops: int = LIMITS["max_ops"]
    max_value: int = LIMITS["max_value"]
    max_exponent: int = LIMITS["max_exponent"]
    integer_only: bool = True
    eval_seed: int = 0
    eval_digits: int = 3
    eval_ops: int = 3
    eval_per_cell: int = 10
    eval_cells: list[str] | None = None
    tolerance: float = 1e-6
    lenient_parse: bool = True
    examples: str = "fixed"
    example_digits: int = 2
    example_ops: int = 2
    student_instruction: str = STUDENT_INSTRUCTION
    reference: str = "steps"

    def __post_init__(self) -> None:
        check_params(self)
        grid_cells(self.eval_digits, self.eval_ops, self.eval_cells)


def check_params(p: ArithParams) -> None:
    """Raise ValueError naming the first field of ``p`` that is not allowed (whole numbers are
    ints, not bools; flags are bools; ranges as in the message)."""
    for key, value in (
        ("num_examples", p.num_examples),
        ("max_chars", p.max_chars),
        ("max_digits", p.max_digits),
        ("max_depth", p.max_depth),
        ("max_ops", p.max_ops),
        ("max_value", p.max_value),
        ("max_exponent", p.max_exponent),
        ("eval_seed", p.eval_seed),
        ("eval_digits", p.eval_digits),
        ("eval_ops", p.eval_ops),
        ("eval_per_cell", p.eval_per_cell),
        ("example_digits", p.example_digits),
        ("example_ops", p.example_ops),
    ):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"arith task: {key} must be a whole number (got {value!r})")
    checks = [
        (0 <= p.num_examples <= len(EXAMPLES), f"num_examples in [0, {len(EXAMPLES)}]", p.num_examples),
        (p.max_chars >= 3, "max_chars >= 3", p.max_chars),
        (p.max_digits >= 1, "max_digits >= 1", p.max_digits),
        (p.max_depth >= 1, "max_depth >= 1", p.max_depth),
        (p.max_ops >= 1, "max_ops >= 1", p.max_ops),
        (10 <= p.max_value <= 2**53, "10 <= max_value <= 2**53", p.max_value),
        (p.max_exponent >= 0, "max_exponent >= 0", p.max_exponent),
        (1 <= p.eval_digits <= 6, "eval_digits in [1, 6]", p.eval_digits),
        (1 <= p.eval_ops <= 6, "eval_ops in [1, 6]", p.eval_ops),
        (p.eval_per_cell >= 1, "eval_per_cell >= 1", p.eval_per_cell),
        (p.tolerance >= 0, "tolerance >= 0", p.tolerance),
        (p.examples in ("fixed", "random"), "examples in ('fixed', 'random')", p.examples),
        (p.reference in ("answer", "steps"), "reference in ('answer', 'steps')", p.reference),
        (1 <= p.example_digits <= 6, "example_digits in [1, 6]", p.example_digits),
        (1 <= p.example_ops <= 6, "example_ops in [1, 6]", p.example_ops),
    ]
    for ok, rule, value in checks:
        if not ok:
            raise ValueError(f"arith task: need {rule} (got {value!r}); set it with --set task.params.<name>=VALUE")
    for key, value in (("integer_only", p.integer_only), ("lenient_parse", p.lenient_parse)):
        if not isinstance(value, bool):
            raise ValueError(f"arith task: {key} must be true or false (got {value!r})")
    if not isinstance(p.student_instruction, str) or not p.student_instruction.strip():
        raise ValueError(
            f"arith task: student_instruction must be a non-empty sentence (got {p.student_instruction!r}); "
            "set it with --set 'task.params.student_instruction=\"Answer with a number.\"' (quoted: a colon "
            "would make it a YAML mapping)"
        )


def grid_cells(eval_digits: int, eval_ops: int, names: list[str] | None) -> list[tuple[int, int]]:
    """The held-out grid's (digits, operators) cells, easiest first (by d + k, then d).

    Args:
        eval_digits, eval_ops: the grid's largest digits and operators (every cell when ``names`` is None).
        names: cells as ``"d<digits>o<operators>"`` (e.g. ``"d2o1"``), each digits in [1, 6] and
            operators in [1, 6]; None: every cell of ``eval_digits`` × ``eval_ops``.

    Raises:
        ValueError: ``names`` is not a non-empty list of distinct cell names of that form.

    >>> grid_cells(2, 2, None), grid_cells(3, 3, ["d2o1", "d1o3"])
    ([(1, 1), (1, 2), (2, 1), (2, 2)], [(2, 1), (1, 3)])
    """
    if names is None:
        cells = [(d, k) for d in range(1, eval_digits + 1) for k in range(1, eval_ops + 1)]
    else:
        if not isinstance(names, list) or not names or len(set(map(str, names))) != len(names):
            raise ValueError(
                f"arith task: eval_cells must be a non-empty list of distinct cells such as "
                f"[d1o1, d2o1] (got {names!r})"
            )
        cells = []
        for name in names:
            match = re.fullmatch(r"d([1-6])o([1-6])", str(name))
            if match is None:
                raise ValueError(
                    f"arith task: eval_cells entry {name!r} is not d<digits>o<operators> "
                    "with digits and operators in [1, 6], such as d2o1"
                )
            cells.append((int(match[1]), int(match[2])))
    return sorted(cells, key=lambda cell: (sum(cell), cell[0]))
