"""The agreement gate: a proposal's program answer must be reachable by an independent solver.

    for each valid proposal:
        answers   = m samples of the frozen base model (adapters off) on the student prompt
        agreement = (# answers graded correct against the program's answer) / m
        valid    ← valid and agreement ≥ τ          # else reason "disagreement"

A program can run cleanly, use every number of its text and still compute something else
(``feet * feet``); an answer that independent solvers reach is more likely the text's answer.
The agreement fraction goes to ``matches.jsonl`` for every gated proposal. Source: R-Zero
(arXiv 2508.05004) §3 (questions kept when independent solver samples agree on the pseudo-label);
PopuLoRA (arXiv 2605.16727) §2 step 3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evolora.bank import Bank
from evolora.config.selfplay import SelfPlayConfig
from evolora.generation.rollout import chat_prompt
from evolora.generation.routed import BASE
from evolora.tasks.base import Task

if TYPE_CHECKING:
    from evolora.hf_types import Tokenizer


def gate_by_agreement(
    bank: Bank, tokenizer: Tokenizer, task: Task, games: list, config: SelfPlayConfig, stats=None
) -> None:
    """Set ``game.agreement`` on every valid game and invalidate those below the threshold, in place.

    Args:
        bank: the adapter bank (the base model answers through the ``__base__`` route).
        games: the step's :class:`evolora.selfplay.GameRecord` list (``problem``, ``answer``, ``valid``).
        config: self-play settings: ``config.agreement`` (solver, samples m, threshold τ) and the
            student's sampling settings, batch size and stop strings.
        stats: a :class:`evolora.generation.rollout.RolloutStats` to add the solver's tokens to, or None.
    """
    gate = config.agreement
    rows = (
        [g for g, game in enumerate(games) if game.valid for _ in range(gate.samples)] if gate.solver == "base" else []
    )
    if not rows:
        return
    prompts = {g: chat_prompt(tokenizer, task.solve_prompt(games[g].problem)) for g in dict.fromkeys(rows)}
    answers = bank.rollout(
        [prompts[g] for g in rows],
        [BASE] * len(rows),
        config.sampling("student", stop=(*config.roles["student"].stop, *task.answer_stop)),
        batch_size=config.generation_batch_size,
        stats=stats,
    )
    correct = {g: 0 for g in prompts}
    for g, answer in zip(rows, answers):
        correct[g] += task.grade(answer.text, games[g].answer).label == "correct"
    for g, hits in correct.items():
        games[g].agreement = hits / gate.samples
        if games[g].agreement < gate.threshold:
            games[g].valid, games[g].reason = False, "disagreement"
