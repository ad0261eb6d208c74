"""Parameter checks of the ``arith`` task: every out-of-range value is refused with the rule
it breaks and the key to set, before any model loads."""

from __future__ import annotations

import re


def check_params(
    *,
    num_examples,
    max_chars,
    max_digits,
    max_depth,
    max_ops,
    max_value,
    max_exponent,
    eval_seed,
    eval_digits,
    eval_ops,
    eval_per_cell,
    tolerance,
    examples,
    example_digits,
    example_ops,
    integer_only,
    lenient_parse,
    student_instruction,
    fixed_examples: int,
    reference: str = "steps",
) -> None:
    """Raise ValueError naming the first :class:`evolora.tasks.arith.ArithTask` parameter that is
    not allowed (whole numbers are ints, not bools; flags are bools; ranges as in the message).

    ``fixed_examples`` is the number of fixed reference examples (the bound of ``num_examples``).
    """
    for key, value in (
        ("num_examples", num_examples),
        ("max_chars", max_chars),
        ("max_digits", max_digits),
        ("max_depth", max_depth),
        ("max_ops", max_ops),
        ("max_value", max_value),
        ("max_exponent", max_exponent),
        ("eval_seed", eval_seed),
        ("eval_digits", eval_digits),
        ("eval_ops", eval_ops),
        ("eval_per_cell", eval_per_cell),
        ("example_digits", example_digits),
        ("example_ops", example_ops),
    ):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"arith task: {key} must be a whole number (got {value!r})")
    checks = [
        (0 <= num_examples <= fixed_examples, f"num_examples in [0, {fixed_examples}]", num_examples),
        (max_chars >= 3, "max_chars >= 3", max_chars),
        (max_digits >= 1, "max_digits >= 1", max_digits),
        (max_depth >= 1, "max_depth >= 1", max_depth),
        (max_ops >= 1, "max_ops >= 1", max_ops),
        (10 <= max_value <= 2**53, "10 <= max_value <= 2**53", max_value),
        (max_exponent >= 0, "max_exponent >= 0", max_exponent),
        (1 <= eval_digits <= 6, "eval_digits in [1, 6]", eval_digits),
        (1 <= eval_ops <= 6, "eval_ops in [1, 6]", eval_ops),
        (eval_per_cell >= 1, "eval_per_cell >= 1", eval_per_cell),
        (tolerance >= 0, "tolerance >= 0", tolerance),
        (examples in ("fixed", "random"), "examples in ('fixed', 'random')", examples),
        (reference in ("answer", "steps"), "reference in ('answer', 'steps')", reference),
        (1 <= example_digits <= 6, "example_digits in [1, 6]", example_digits),
        (1 <= example_ops <= 6, "example_ops in [1, 6]", example_ops),
    ]
    for ok, rule, value in checks:
        if not ok:
            raise ValueError(f"arith task: need {rule} (got {value!r}); set it with --set task.params.<name>=VALUE")
    for key, value in (("integer_only", integer_only), ("lenient_parse", lenient_parse)):
        if not isinstance(value, bool):
            raise ValueError(f"arith task: {key} must be true or false (got {value!r})")
    if not isinstance(student_instruction, str) or not student_instruction.strip():
        raise ValueError(
            f"arith task: student_instruction must be a non-empty sentence (got {student_instruction!r}); "
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
