"""gsm seeded proposals: seeds are functions of their stated numbers, parsing the two seeded
modes, and the checks that tie a varied problem to its seed's program."""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from evolora.tasks.gsm import GSMTask
from evolora.tasks.gsm.data import _program_from_calculations
from evolora.tasks.gsm.seeds import Seed, cues, load_seeds, seed_from_program, seed_reasons, split_program

CLIPS = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
)
CLIPS_ANSWER = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips.\n#### 72"


def _seed() -> Seed:
    return seed_from_program(CLIPS, _program_from_calculations(CLIPS_ANSWER), 72)


def test_a_gsm8k_problem_becomes_a_function_of_its_stated_numbers():
    seed = _seed()
    assert seed.function == "def answer(a):\n    step1 = a / 2\n    step2 = a + step1\n    return step2"
    assert seed.values == (48.0,) and seed.program.endswith("print(answer(48))")
    assert seed.template().startswith("Natalia sold clips to {a} of her friends")
    # a literal that no stated number explains (an intermediate result) makes no seed
    assert seed_from_program("Tom has 3 bags of 4 apples. How many apples?", "print(3 * 4 + 7)", 19) is None


def test_every_shipped_seed_reproduces_its_gsm8k_answer_shape():
    seeds = load_seeds()
    assert 200 <= len(seeds) <= 400
    for seed in seeds[:50]:
        namespace: dict = {}
        exec(seed.function, namespace)  # noqa: S102 - the package's own data
        assert namespace["answer"](*seed.values) is not None
        assert split_program(seed.program) == (seed.function, [Fraction(str(v)) for v in seed.values])


@pytest.mark.parametrize(
    "problem, call, expected",
    [
        ("Tom sold 30 cups in June, and half as many in July. How many cups did he sell altogether?", "30", []),
        ("Tom sold 30 cups in June, and twice as many in July. How many cups did he sell altogether?", "30", ["cues"]),
        (
            "Tom sold 30 cups in June and 12, half as many, in July. How many cups did he sell altogether?",
            "30",
            ["quantity_order"],
        ),
        (
            "Tom sold 48 cups in June, and half as many in July. How many cups did he sell altogether?",
            "48",
            ["copied_seed"],
        ),
        (
            "Tom sold 30 cups in June, and half as many in July. How many cups did he sell altogether?",
            "30, 2",
            ["structure"],
        ),
    ],
)
def test_seed_reasons(problem, call, expected):
    seed = _seed()
    program = f"{seed.function}\nprint(answer({call}))"
    assert seed_reasons(problem, program, {seed.function: [seed]}) == expected
    assert seed_reasons(problem, "def answer(a):\n    return a * 3\nprint(answer(30))", {seed.function: [seed]}) == [
        "structure"
    ]


def test_cues_hold_relation_and_number_words():
    assert cues("She sold half as many, 3 more than each day") >= {"half", "more", "each", "than"}


def test_a_varied_answer_must_be_positive_like_every_gsm8k_answer():
    seed = _seed()
    text = "Tom sold 31 cups in June, and half as many in July. How many cups did he sell altogether?"
    program = f"{seed.function}\nprint(answer(31))"
    assert seed_reasons(text, program, {seed.function: [seed]}, -3) == ["not_positive"]
    assert seed_reasons(text, program, {seed.function: [seed]}, 0) == ["not_positive"]
    assert seed_reasons(text, program, {seed.function: [seed]}, 46.5) == []  # a fractional count: whole_count's job


def _complete(task: GSMTask, completion: str, seed_index: int = 0):
    request = task.proposal_request(random.Random(seed_index))
    return request, task.parse_proposal(request.prefix + completion)


def test_seeded_mode_forces_the_seed_function_and_parses_the_new_problem():
    task = GSMTask(proposal="seeded", workers=1, runs=1)
    request = task.proposal_request(random.Random(3))
    seed = next(s for s in task._seeded.seeds if s.problem == request.examples[0])
    assert (
        request.prefix == f"```python\n{seed.function}\nprint(answer("
        and seed.problem in request.messages[1]["content"]
    )
    assert [s.forced for s in request.segments] == ["", "```\nProblem:"]
    args = ", ".join(str(int(v) + 1) for v in seed.values)
    proposal = task.parse_proposal(request.prefix + f"{args}))\n```\nProblem: A new problem text here?")
    assert (
        proposal.problem == "A new problem text here?" and proposal.program == f"{seed.function}\nprint(answer({args}))"
    )
    assert task.parse_proposal(request.prefix + f"{args}))\n```\nProblem: ok") is None  # < 3 words
    task.close()


def test_numbers_mode_fills_the_template_and_the_verdict_follows_the_program():
    seeds = [_seed()]
    task = GSMTask(proposal="numbers", workers=1, runs=1)
    task._seeded.seeds, task._seeded.by_function = seeds, {seeds[0].function: seeds}
    request = task.proposal_request(random.Random(0))
    assert request.prefix.startswith("Problem: Natalia sold clips to {a} of her friends") and len(request.segments) == 1
    new = task.parse_proposal(request.prefix + "30))\n")
    same = task.parse_proposal(request.prefix + "48))\n")
    odd = task.parse_proposal(request.prefix + "31))\n")
    assert new.problem.startswith("Natalia sold clips to 30 of her friends") and new.program.endswith(
        "print(answer(30))"
    )
    try:
        verdicts = task.verify([new, same, odd])
    finally:
        task.close()
    assert [(v.valid, v.answer, v.reason) for v in verdicts] == [
        (True, 45.0, "ok"),
        (False, 72.0, "copied_seed"),
        (False, 46.5, "fractional_count"),
    ]


def test_an_unknown_proposal_mode_fails_before_any_model_loads():
    with pytest.raises(ValueError, match="proposal in"):
        GSMTask(proposal="template")


def test_simple_seeds_join_the_draw_with_their_fraction():
    from evolora.tasks.gsm.seeds import simple_seeds

    simple = simple_seeds()
    assert len(simple) == 13 and any(s.problem.startswith("A box holds 6 eggs") for s in simple)
    task = GSMTask(proposal="numbers", simple_fraction=1.0, workers=1, runs=1)
    rng = random.Random(0)
    assert all(task.proposal_request(rng).examples[0] in {s.problem for s in simple} for _ in range(10))
    request = task.proposal_request(rng)
    seed = next(s for s in simple if s.problem == request.examples[0])
    args = ", ".join(str(int(v) + 2) for v in seed.values)
    verdict = task.verify([task.parse_proposal(request.prefix + f"{args}))\n")])[0]
    task.close()
    assert verdict.reason in {"ok", "fractional_count"} and verdict.answer is not None
    with pytest.raises(ValueError, match="simple_fraction"):
        GSMTask(proposal="numbers", simple_fraction=1.5)
