"""The run's problem memory: repetition across steps costs the full penalty, a question valid with
one answer cannot later be valid with another, and the memory survives a checkpoint."""

from __future__ import annotations

import pytest

from evolora.config import RewardConfig
from evolora.selfplay import GameRecord, _check_memory, _score
from evolora.selfplay.memory import ProblemMemory, same_answer

BAT = "A bat and a ball cost $1.10 together. How much is the ball?"


def _game(problem: str | None, answer, valid: bool = True) -> GameRecord:
    return GameRecord(
        teacher="T0",
        student="S0",
        proposal_text="",
        problem=problem,
        program="print(1)",
        valid=valid,
        reason="ok" if valid else "error",
        answer=answer,
    )


def test_window_and_answers():
    memory = ProblemMemory(window=2)
    memory.record(1, [("bat", True, 0.05), ("cat", False, None)])
    assert memory.recent("bat", 2) and memory.recent("bat", 3) and not memory.recent("bat", 4)
    assert not memory.recent("bat", 1)  # the same step is the within-step rule's business
    assert memory.conflicts("bat", 10.1) and not memory.conflicts("bat", 0.05 + 1e-16)
    assert not memory.conflicts("cat", 3.0)  # never valid: no truth to contradict
    memory.record(5, [("dog", True, 2.0)])
    assert "bat" not in memory.last_step and memory.answers["bat"] == 0.05  # answers outlive the window
    with pytest.raises(ValueError, match="window"):
        ProblemMemory(-1)
    assert same_answer(3, 3.0) and not same_answer(True, 1.0 + 1e-3)


def test_a_recurring_question_with_another_answer_is_invalid_and_repeats_pay_the_full_penalty():
    memory = ProblemMemory(window=10)
    first = [_game(BAT, 0.05)]
    assert _check_memory(first, memory, step=1) == [False] and first[0].valid
    second = [
        _game(BAT.replace("How", "how"), 10.1),
        _game("Ann has 3 cats. How many cats?", 3.0),
        _game("Ann has 3 cats. How many cats?", 4.0),
    ]
    recent = _check_memory(second, memory, step=2)
    assert recent == [True, False, False]
    assert [(g.valid, g.reason) for g in second] == [
        (False, "inconsistent_answer"),
        (True, "ok"),
        (False, "inconsistent_answer"),
    ]  # within the step too
    rewards = RewardConfig(repetition=0.5)
    for game in second:
        game.grades, game.student_rewards, game.attempts = [], [], []
    second[1].grades = ["correct", "wrong"]
    _score(_NoTask(), second, [], [], [_Proposal()] * 3, rewards, ["T0", "S0"], recent)
    assert [g.repetition_penalty for g in second] == pytest.approx([0.5, 0.25, 0.25])  # full λ; λ (k-1)/(N-1)
    without = [_game(BAT, 10.1)]
    assert _check_memory(without, None, step=3) == [False] and without[0].valid  # no memory: no check


def test_the_memory_round_trips_through_its_state():
    memory = ProblemMemory(window=3)
    memory.record(4, [("bat", True, 0.05)])
    restored = ProblemMemory(window=3)
    restored.load_state_dict(memory.state_dict())
    assert restored.recent("bat", 6) and restored.conflicts("bat", 1.0)


class _Proposal:
    prompt_ids, completion_ids, mask = (1,), (2,), None


class _NoTask:
    def grade(self, text, answer):  # pragma: no cover - no attempt is graded here
        raise AssertionError("no attempts")
