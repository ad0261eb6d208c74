"""gsm grounding rules: each rule rejects what it should and passes what it should, on hand-built
proposals; the task turns a breach into an invalid verdict with its own reason."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from evolora.tasks.base import Proposal
from evolora.tasks.gsm import GSMTask
from evolora.tasks.gsm.grounding import RULES, grounding_reasons, program_literals, stated_quantities

BAT_AND_BALL = (
    "A bat and a ball together cost $1.10. The bat costs $1.00 more than the ball. How much does the ball cost?"
)


def test_stated_quantities_read_money_commas_decimals_and_percentages():
    got = stated_quantities("A $1,250.50 TV is 15% off, and 3 more cost 20 percent less; call 555-12.")
    assert got[:4] == [(Fraction("1250.5"), False), (Fraction(15), True), (Fraction(3), False), (Fraction(20), True)]
    assert program_literals("x = 3\nprint(x * 2.5 + True)") == [Fraction(3), Fraction("2.5")]


@pytest.mark.parametrize(
    "problem, program, answer, expected",
    [
        (BAT_AND_BALL, "total = 1.10\ndiff = 1.00\nprint((total - diff) / 2)", 0.05, []),
        (BAT_AND_BALL, "print(1.10 * 10 - 0.9 + 1.00)", 10.1, ["unexplained_constant"]),  # 0.9 is nowhere
        (BAT_AND_BALL, "print(1.10)", 1.1, ["copied_answer"]),  # $1.00 is 1: exempt from the used-quantity rule
        (
            "Sue buys 6 eggs at $2 each. What does she pay?",
            "print(6 * 5)",
            30,
            ["unused_quantity", "unexplained_constant"],
        ),
        ("Tom has 3 bags of 12 apples. How many apples? How many bags?", "print(3 * 12)", 36, ["several_questions"]),
        ("Tom has 3 bags of 12 apples. Count them.", "print(3 * 12)", 36, ["no_question"]),
        ("How many legs does a cat have?", "print(4)", 4, ["no_quantity"]),
        ("A farm has 14 cows and twice as many hens. How many legs are there?", "print(14 * 4 + 14 * 2 * 2)", 112, []),
        ("A shirt costs $25 and is 20% off. What does it cost now?", "print(25 * (1 - 0.20))", 20, []),
        (
            "Ann saves $15 a week from week 1. How much after 4 weeks?",
            "print(15 * 4)",
            60,
            [],
        ),  # "week 1" may go unused
        ("Ben has 8 pens and buys 5. How many pens now?", "print(8 + 5 + 37)", 50, ["unexplained_constant"]),
    ],
)
def test_each_rule_on_hand_built_proposals(problem, program, answer, expected):
    assert grounding_reasons(problem, program, answer) == expected


def test_a_rule_subset_checks_only_those_rules():
    assert grounding_reasons(BAT_AND_BALL, "print(1.10)", 1.1, rules=("copied_answer",)) == ["copied_answer"]
    assert grounding_reasons(BAT_AND_BALL, "print(1.10)", 1.1, rules=()) == []


def test_every_reference_example_is_grounded():
    """The prompts' own examples are consistent by construction: the rules must pass all of them."""
    from evolora.tasks.gsm.params import EXAMPLE_SETS

    for path in EXAMPLE_SETS.values():
        for example in json.loads(path.read_text())["examples"]:
            assert grounding_reasons(example["problem"], example["program"], example["answer"]) == [], example


def test_the_task_turns_a_breach_into_an_invalid_verdict_with_its_reason():
    task = GSMTask(example_set="simple", workers=1, runs=1)
    good = Proposal(problem=BAT_AND_BALL, program="print((1.10 - 1.00) / 2)", raw="")
    bad = Proposal(problem=BAT_AND_BALL, program="print(1.10 * 10 - 0.9 + 1.00)", raw="")
    try:
        verdicts = task.verify([good, bad, None])
    finally:
        task.close()
    assert [(v.valid, v.reason) for v in verdicts] == [(True, "ok"), (False, "unexplained_constant"), (False, "parse")]
    assert verdicts[0].answer == pytest.approx(0.05) and verdicts[1].answer == pytest.approx(11.1)
    off = GSMTask(example_set="simple", workers=1, runs=1, grounding=False)
    try:
        assert off.verify([bad])[0].valid
    finally:
        off.close()
    assert GSMTask(grounding=["copied_answer"]).grounding == ("copied_answer",) and set(RULES) >= {"quantities"}
    with pytest.raises(ValueError, match="grounding is true, false or a list"):
        GSMTask(grounding=["spelling"])
