"""The settings of the ``gsm`` task as a frozen dataclass, checked when built (every out-of-range
value is refused with its allowed range, before any model loads), and the example sets it names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evolora.tasks.gsm.grounding import RULES
from evolora.tasks.gsm.proposal_modes import PROPOSAL_MODES

DATA = Path(__file__).resolve().parents[2] / "data"
EXAMPLES_PATH = DATA / "gsm_examples.json"
"""Reference examples written for evolora: {"examples": [{"problem", "program", "answer"}]}."""
EXAMPLE_SETS = {"default": EXAMPLES_PATH, "simple": DATA / "gsm_simple_examples.json"}
"""``example_set`` names: ``default`` (12 problems of two to four steps) or ``simple`` (16 of
one or two steps, which a 135M student sometimes solves)."""


@dataclass(frozen=True)
class GSMParams:
    """The settings of the ``gsm`` task (``task.params`` in YAML), checked when built.

    Args:
        train_path: GSM8K train jsonl ({"question", "answer"}, answer ending "#### N").
            When given, each teacher example comes from it with probability
            ``gsm8k_fraction`` (its program is rebuilt from the <<a*b=c>> calculator
            annotations); otherwise all examples are evolora's own
            (``evolora/data/gsm_examples.json``, 12 problems with real programs).
        eval_path: GSM8K test jsonl (or .jsonl.gz) for :meth:`~evolora.tasks.gsm.task.GSMTask.held_out`. None: the GSM8K
            test split shipped inside the package (1,319 problems, ``evolora/data``).
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
        tolerance: relative and absolute tolerance when comparing two non-integers
            (integers and rationals always compare exactly).
        example_set: which of evolora's own example sets (:data:`EXAMPLE_SETS`) to draw from.
        structured: True makes the teacher rollout two segments (:meth:`~evolora.tasks.gsm.task.GSMTask.proposal_request`):
            the problem, stopped at a blank line or a fence; then the forced
            :data:`~evolora.tasks.gsm.task.PROGRAM_FENCE` and the program, stopped at the closing fence.
        problem_tokens, program_tokens: token limits of the two segments (>= 1).
        program_temperature: sampling temperature of the program segment (> 0); None: the
            teacher's. The problem keeps the teacher's temperature (its diversity), the
            program is written closer to greedy (its validity).
        forced_print: a third segment: the program segment also stops at ``print(``, then
            ``print(`` is forced and the model writes the printed expression (one line), so
            every program ends by printing a value.
        grounding: the grounding rules a valid program must also pass
            (:mod:`evolora.tasks.gsm.grounding`): True (all of :data:`~evolora.tasks.gsm.grounding.RULES`),
            False (none: any program that prints a number is the truth), or a list of rule names.
        proposal: what the teacher writes (:data:`~evolora.tasks.gsm.proposal_modes.PROPOSAL_MODES`):
            ``free`` (a new problem and program after ``num_examples`` examples), ``seeded`` (a GSM8K
            train seed's program is given; the teacher calls it with new numbers, then writes a problem
            stating them in order), ``numbers`` (the seed's text and program are given with their numbers
            blanked; the teacher writes only the new numbers).
        value_tokens: token limit of the numbers segment of ``seeded`` and ``numbers`` (>= 1).
        value_temperature: sampling temperature of that segment (> 0; None: the teacher's).
        simple_fraction: with ``seeded`` or ``numbers``, the probability in [0, 1] that a seed is one of
            evolora's simple problems (one or two steps; a 135M student sometimes solves them) rather
            than one of the 300 GSM8K train seeds shipped in ``evolora/data/gsm_seeds.json``.

    Raises:
        ValueError: a value out of its range (the message names the key and the rule).
        FileNotFoundError: ``train_path`` or ``eval_path`` is not a file.
    """

    train_path: str | None = None
    eval_path: str | None = None
    num_examples: int = 2
    gsm8k_fraction: float = 0.5
    timeout_s: float = 2.0
    memory_mb: int = 256
    output_limit: int = 4096
    workers: int = 2
    runs: int = 2
    max_problem_chars: int = 1200
    max_program_chars: int = 3000
    require_marker: bool = False
    tolerance: float = 1e-6
    example_set: str = "default"
    structured: bool = False
    problem_tokens: int = 96
    program_tokens: int = 96
    program_temperature: float | None = None
    forced_print: bool = False
    grounding: bool | list[str] = True
    proposal: str = "free"
    value_tokens: int = 24
    value_temperature: float | None = 1.0
    simple_fraction: float = 0.0

    def __post_init__(self) -> None:
        check_params(self)
        grounding_rules(self.grounding)
        for key in ("eval_path", "train_path"):
            path = getattr(self, key)
            if path is not None and not Path(path).is_file():
                raise FileNotFoundError(
                    f"gsm task: {key} {path!r} is not a file; give a GSM8K .jsonl path "
                    f"(--set task.params.{key}=PATH) or null"
                )


def check_params(p: GSMParams) -> None:
    """Raise ValueError naming every out-of-range field of ``p`` and its allowed range."""
    if p.num_examples < 0 or p.runs < 1 or p.workers < 1 or not 0.0 <= p.gsm8k_fraction <= 1.0:
        raise ValueError(
            f"gsm task: need num_examples >= 0 (got {p.num_examples}), runs >= 1 (got {p.runs}), "
            f"workers >= 1 (got {p.workers}), 0 <= gsm8k_fraction <= 1 (got {p.gsm8k_fraction})"
        )
    if p.timeout_s <= 0 or p.memory_mb < 32 or p.output_limit < 1 or p.tolerance < 0:
        raise ValueError(
            f"gsm task: need timeout_s > 0 (got {p.timeout_s}), memory_mb >= 32 (got {p.memory_mb}), "
            f"output_limit >= 1 (got {p.output_limit}), tolerance >= 0 (got {p.tolerance})"
        )
    if (
        p.example_set not in EXAMPLE_SETS
        or not isinstance(p.structured, bool)
        or min(p.problem_tokens, p.program_tokens) < 1
    ):
        raise ValueError(
            f"gsm task: need example_set in {sorted(EXAMPLE_SETS)} (got {p.example_set!r}), structured "
            f"true/false (got {p.structured!r}), problem_tokens and program_tokens >= 1 "
            f"(got {p.problem_tokens}, {p.program_tokens})"
        )
    if p.program_temperature is not None and not p.program_temperature > 0:
        raise ValueError(f"gsm task: need program_temperature > 0 or null (got {p.program_temperature!r})")
    if (
        p.proposal not in PROPOSAL_MODES
        or p.value_tokens < 1
        or not (p.value_temperature is None or p.value_temperature > 0)
        or not 0.0 <= p.simple_fraction <= 1.0
    ):
        raise ValueError(
            f"gsm task: need proposal in {list(PROPOSAL_MODES)} (got {p.proposal!r}), value_tokens "
            f">= 1 (got {p.value_tokens}), value_temperature > 0 or null (got {p.value_temperature!r}) "
            f"and 0 <= simple_fraction <= 1 (got {p.simple_fraction!r})"
        )


def grounding_rules(grounding: bool | list[str]) -> tuple[str, ...]:
    """The rule names of ``grounding`` (True: all, False: none).

    Raises:
        ValueError: an unknown rule name (the message lists them).
    """
    if isinstance(grounding, bool):
        return RULES if grounding else ()
    if not isinstance(grounding, (list, tuple)) or any(r not in RULES for r in grounding):
        raise ValueError(f"gsm task: grounding is true, false or a list of {', '.join(RULES)}; got {grounding!r}")
    return tuple(grounding)
