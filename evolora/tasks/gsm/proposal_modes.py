"""Seeded proposal modes of the gsm teacher: vary a GSM8K train seed instead of writing from nothing.

``seeded``: the prompt shows a seed problem and its program as a function of the stated numbers
(:mod:`evolora.tasks.gsm.seeds`); the answer is forced to start with the function and
``print(answer(``, the teacher writes the new numbers, then (after a forced ``Problem:``) a new
problem that states them in order, new names and objects allowed::

    ```python                                   <- forced (the seed's function)
    def answer(a):
        ...
    print(answer(  |30))                        <- the teacher's numbers
    ```                                         <- forced
    Problem:  |Tom read 30 pages ...            <- the teacher's problem

``numbers``: the forced start also holds the seed's problem with its numbers blanked (``{a}``);
the teacher writes only the numbers, and the problem the student sees is the template filled in
(GSM-Symbolic's templates, arXiv 2410.05229).

The program decides the truth in both: the function is the seed's (the same operations), the
checks of :func:`evolora.tasks.gsm.seeds.seed_reasons` tie the text to the call, and the grounding
rules apply as to any proposal.

Source: PopuLoRA (arXiv 2605.16727) §2 step 2; GSM8K (arXiv 2110.14168); the modes are evolora's own.
"""

from __future__ import annotations

import random
import re
from fractions import Fraction

from evolora.parsing import FENCE
from evolora.tasks.base import Message, Proposal, ProposalRequest, Segment
from evolora.tasks.gsm.seeds import (
    PARAMS,
    Seed,
    function_value,
    load_seeds,
    number_literal,
    seed_reasons,
    simple_seeds,
    split_program,
)

PROPOSAL_MODES = ("free", "seeded", "numbers")
"""Values of ``task.params.proposal``."""
SYSTEM = "You write grade-school math word problems and Python programs that solve them."
SEEDED_INSTRUCTION = (
    "Here is a math word problem and a Python program that solves it.\n\n{example}\n\n"
    "Write a new problem that the same program solves with new numbers. You may change the names "
    "and objects. First call answer with the new numbers, then write the new problem: it states "
    "those numbers in the same order and asks one question."
)
NUMBERS_INSTRUCTION = (
    "Here is a math word problem with its numbers left out ({names}) and a Python program that "
    "solves it.\n\n{example}\n\nFor example, {calls} make two problems. Choose other numbers for "
    "{names} and write the call to answer."
)
_PLACEHOLDER = re.compile(r"\{([a-h])\}")
_AFTER_FENCE = re.compile(r"```[^\n]*\n\s*Problem\s*:", re.IGNORECASE)


def fill_template(template: str, args: list[Fraction]) -> str:
    """``template`` with ``{a}``, ``{b}``, ... replaced by ``args`` in order of the names."""
    return _PLACEHOLDER.sub(lambda m: number_literal(args[PARAMS.index(m.group(1))]), template)


def _nearby(value: float, rng: random.Random) -> float:
    """An example number for a prompt: a whole number between half and twice ``value`` (at least 1),
    or ``value`` itself when it is not whole (0.25, 1.5: a rate or a fraction)."""
    if value != int(value):
        return value
    return rng.randint(max(1, int(value) // 2), max(2, 2 * int(value)))


def example_call(seed: Seed, rng: random.Random, tries: int = 20) -> list[float]:
    """Numbers near the seed's (:func:`_nearby`) whose answer is whole and positive, as GSM8K's are
    (the first of ``tries`` draws that is; else the last draw): the prompt's example calls."""
    for _ in range(tries):
        call = [_nearby(v, rng) for v in seed.values]
        value = function_value(seed.function, call)
        if value is not None and value > 0 and value == int(value) and list(map(float, call)) != list(seed.values):
            return call
    return call


class SeededProposals:
    """Requests, parsing and checks of the ``seeded`` and ``numbers`` proposal modes.

    Args:
        mode: ``seeded`` or ``numbers``.
        value_tokens: token limit of the numbers segment (>= 1).
        value_temperature: sampling temperature of the numbers segment (> 0; None: the teacher's).
        simple_fraction: probability in [0, 1] that a request's seed is one of evolora's simple
            problems (:func:`evolora.tasks.gsm.seeds.simple_seeds`) instead of a GSM8K one.
        problem_tokens: token limit of the problem segment of ``seeded`` (>= 1).
        seeds: the seeds (default: the slice shipped in the package, :func:`load_seeds`).
    """

    def __init__(
        self,
        mode: str,
        value_tokens: int,
        problem_tokens: int,
        value_temperature: float | None = None,
        simple_fraction: float = 0.0,
        seeds: list[Seed] | None = None,
    ) -> None:
        self.mode = mode
        self.seeds = load_seeds() if seeds is None else seeds
        self.simple = simple_seeds() if simple_fraction > 0 else []
        self.simple_fraction = simple_fraction
        self.by_function: dict[str, list[Seed]] = {}
        for seed in [*self.seeds, *self.simple]:
            self.by_function.setdefault(seed.function, []).append(seed)
        values = Segment(stop=("\n",), max_new_tokens=value_tokens, temperature=value_temperature)
        self.segments = (
            (values,)
            if mode == "numbers"
            else (
                values,
                Segment(forced="```\nProblem:", stop=("\n\n", "```"), max_new_tokens=problem_tokens, keep_stop=False),
            )
        )

    def request(self, rng: random.Random) -> ProposalRequest:
        """One teacher request on a seed drawn with ``rng``: the prompt, the forced start (the seed's
        function up to ``print(answer(``; in ``numbers`` the blanked problem before it), the seed's
        problem as the shown example (a copy of it pays the copied reward) and the segments."""
        seed = rng.choice(self.simple if self.simple and rng.random() < self.simple_fraction else self.seeds)
        names = seed.function[len("def answer(") : seed.function.index(")")]
        if self.mode == "numbers":  # the seed's numbers stay out of view: a 135M model copies them
            example = f"Problem: {seed.template()}\n```python\n{seed.function}\n```"
            calls = [example_call(seed, rng) for _ in range(2)]
            text = NUMBERS_INSTRUCTION.format(
                example=example,
                names=names,
                calls=" or ".join(f"print(answer({', '.join(map(number_literal, c))}))" for c in calls),
            )
            prefix = f"Problem: {seed.template()}\n```python\n{seed.function}\nprint(answer("
            shown = tuple(fill_template(seed.template(), [Fraction(str(v)) for v in c]) for c in calls)
            return ProposalRequest(
                [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
                prefix,
                examples=(seed.problem, *shown),
                segments=self.segments,
            )
        else:
            text = SEEDED_INSTRUCTION.format(example=f"Problem: {seed.problem}\n```python\n{seed.program}\n```")
            prefix = f"```python\n{seed.function}\nprint(answer("
        messages: list[Message] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]
        return ProposalRequest(messages, prefix, examples=(seed.problem,), segments=self.segments)

    def parse(self, text: str) -> Proposal | None:
        """The proposal of a seeded completion (forced start included), or None when it has no
        program fence or no problem text (>= 3 words).

        ``seeded``: the program is the first fence; the problem follows ``Problem:`` after it.
        ``numbers``: the problem is the template before the fence with ``{a}``, ``{b}``, ... filled
        by the call's numbers (left blank when the call is malformed; the checks then reject it).
        """
        fence = FENCE.search(text)
        if fence is None:
            return None
        program = fence.group(1).strip("\n").rstrip()
        if self.mode == "numbers":
            head = text[: fence.start()].strip()
            problem = head.split(":", 1)[1].strip() if head.lower().startswith("problem:") else head
            parts = split_program(program)
            if parts is not None and len(parts[1]) == len(set(_PLACEHOLDER.findall(problem))):
                program, problem = (
                    f"{parts[0]}\nprint(answer({', '.join(map(number_literal, parts[1]))}))",
                    fill_template(problem, parts[1]),
                )
        else:
            after = _AFTER_FENCE.search(text, fence.start())
            problem = text[after.end() :].strip() if after else ""
        if len(problem.split()) < 3 or "```" in problem:
            return None
        return Proposal(problem=problem, program=program, raw=text)

    def reasons(self, proposal: Proposal, answer: float | int | None) -> list[str]:
        """:func:`evolora.tasks.gsm.seeds.seed_reasons` of the proposal (and its printed answer) against the seeds."""
        return seed_reasons(proposal.problem, proposal.program, self.by_function, answer)
