"""The common exam of an evolution event: every member of a role on the same problems, one batched call.

    window.add(step, games)                             # every step: the proposals since the last event
    items   = exam_items(window, dev_items, config)     # newest valid teacher problems, distinct, + dev top-up
    exam    = sit_exam(bank, tokenizer, task, solvers, items, ...)   # (P, N) outcomes [+ log-probs]
    scores  = exam_scores(exam, window, proposers)      # solver accuracy / logprob, teacher separation
    window.clear()                                      # the next event examines newer problems

A solver's score is its accuracy (or the mean per-token log-probability of each problem's worked
answer); a teacher's is the share of its proposals since the last event that were valid *and*
separated the solvers (solved by some, not all): problems at the students' frontier. The member ×
problem outcomes are kept in the event record, for case-based selection (lexicase) over them.

Source: PopuLoRA (arXiv 2605.16727) §3 (fitness from self-play outcomes); the common exam is
evolora's own (docs/concepts/index.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from evolora.config.fitness import FitnessConfig
from evolora.evaluation import evaluate
from evolora.generation.rollout import chat_prompt
from evolora.learner import Sample
from evolora.operators.breeding import separating, solve_rates
from evolora.tasks.base import HeldOutItem, Task, normalise_problem

if TYPE_CHECKING:
    from evolora.bank import Bank
    from evolora.hf_types import Tokenizer

DEV = "dev"
"""The source named for an exam problem from the task's dev set (others name their teacher)."""

LOGPROB_ROWS = 64
"""Rows per teacher-forced log-prob call of :func:`sit_exam` (bounds the logits' memory)."""


class ExamWindow:
    """The proposals of every step since the last evolution event (checkpointed with the run).

    Each entry: {"step", "teacher", "valid", "question", "answer"}; ``question`` is None when invalid.
    """

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def add(self, step: int, games) -> None:
        """Record a step's games (:class:`evolora.selfplay.GameRecord`), in play order."""
        self.entries += [
            {
                "step": step,
                "teacher": g.teacher,
                "valid": bool(g.valid and g.problem),
                "question": g.problem if g.valid else None,
                "answer": g.answer if g.valid else None,
            }
            for g in games
        ]

    def proposals(self, teacher: str) -> int:
        """How many proposals ``teacher`` made since the last event."""
        return sum(e["teacher"] == teacher for e in self.entries)

    def clear(self) -> None:
        """Start the next window (after an event)."""
        self.entries = []

    def state_dict(self) -> dict:
        return {"entries": list(self.entries)}

    def load_state_dict(self, state: dict) -> None:
        self.entries = list(state["entries"])


@dataclass(frozen=True)
class Exam:
    """One sitting: ``items`` (N problems), their ``sources`` (a teacher id or :data:`DEV`), the
    solvers' ids in row order, ``outcomes`` (P, N) float {0, 1} and ``logprob`` (P, N) float64 nats
    per token of the worked answer (None when not measured)."""

    items: list[HeldOutItem]
    sources: list[str]
    members: list[str]
    outcomes: torch.Tensor
    logprob: torch.Tensor | None

    def to_dict(self) -> dict:
        """The event record's ``exam``: problems, sources and each member's outcome string ("0110…")."""
        record = {
            "questions": [i.question for i in self.items],
            "answers": [i.answer for i in self.items],
            "sources": list(self.sources),
            "outcomes": {m: "".join(str(int(v)) for v in row.tolist()) for m, row in zip(self.members, self.outcomes)},
        }
        if self.logprob is not None:
            record["logprob"] = {m: [round(v, 4) for v in row.tolist()] for m, row in zip(self.members, self.logprob)}
        return record


def exam_items(window: ExamWindow, dev_items: list[HeldOutItem] | None, config: FitnessConfig) -> tuple[list, list]:
    """(items, sources) of the next exam: up to ``config.problems`` distinct valid problems of the window,
    taken in turn from each teacher, newest first, then the dev problems when ``config.top_up``.

    Problems are distinct by :func:`evolora.tasks.base.normalise_problem`; a dev problem equal to a
    self-play one is not repeated.
    """
    queues: dict[str, list[dict]] = {}
    for entry in reversed(window.entries):
        if entry["valid"]:
            queues.setdefault(entry["teacher"], []).append(entry)
    items, sources, seen = [], [], set()
    while len(items) < config.problems and any(queues.values()):
        for teacher in list(queues):
            if queues[teacher] and len(items) < config.problems:
                entry = queues[teacher].pop(0)
                key = normalise_problem(entry["question"])
                if key not in seen:
                    seen.add(key)
                    items.append(HeldOutItem(entry["question"], entry["answer"]))
                    sources.append(teacher)
    for item in (dev_items or []) if config.top_up else []:
        if normalise_problem(item.question) not in seen:
            items.append(item)
            sources.append(DEV)
    return items, sources


def sit_exam(
    bank: Bank,
    tokenizer: Tokenizer,
    task: Task,
    solvers: dict[str, str],
    items: list[HeldOutItem],
    sources: list[str],
    *,
    max_new_tokens: int,
    batch_size: int | None,
    logprob: bool,
) -> Exam:
    """Every solver on ``items``: greedy answers in one batched engine call, graded by the task.

    Args:
        solvers: {bank slot: member id}, in row order.
        items, sources: from :func:`exam_items`.
        max_new_tokens: the cap of each greedy answer, in tokens.
        batch_size: rows per decode batch (None: the engine's default).
        logprob: also take the teacher-forced log-probability of each problem's worked answer
            (:meth:`Task.reference_solution`) under each solver, in calls of :data:`LOGPROB_ROWS` rows.

    Returns:
        An :class:`Exam` (outcomes (P, N); logprob (P, N) or None).

    Raises:
        ValueError: ``logprob`` for a task without reference solutions.
    """
    if logprob and not task.reference_solutions:
        raise ValueError(f"evolution.fitness.score=logprob: task {task.name!r} has no worked answers; use accuracy")
    results = evaluate(
        bank, tokenizer, task, items, list(solvers), max_new_tokens=max_new_tokens, batch_size=batch_size
    )
    outcomes = torch.tensor(
        [[float(label == "correct") for label in results[slot].labels] for slot in solvers],
        dtype=torch.float32,
        device="cpu",
    ).reshape(len(solvers), len(items))
    scores = _answer_logprobs(bank, tokenizer, task, list(solvers), items) if logprob and items else None
    return Exam(items, list(sources), list(solvers.values()), outcomes, scores)


def _answer_logprobs(bank: Bank, tokenizer: Tokenizer, task: Task, slots: list[str], items: list[HeldOutItem]):
    """(P, N) mean per-token log-probability (nats) of each item's worked answer under each slot."""
    samples = []
    for item in items:
        prompt = tuple(chat_prompt(tokenizer, task.held_out_prompt(item)))
        answer = tuple(
            tokenizer(task.reference_solution(item.question, item.answer), add_special_tokens=False)["input_ids"]
        )
        samples.append(Sample(prompt, answer or (tokenizer.eos_token_id,), 0.0, "exam"))
    rows = [(slot, sample) for slot in slots for sample in samples]
    means = []
    for start in range(0, len(rows), LOGPROB_ROWS):
        chunk = rows[start : start + LOGPROB_ROWS]
        values = bank.logprobs([slot for slot, _ in chunk], [sample for _, sample in chunk])  # (B, T_c), 0 on padding
        lengths = torch.tensor([len(sample.completion_ids) for _, sample in chunk], dtype=torch.float64, device="cpu")
        means += (values.double().sum(dim=1) / lengths).tolist()
    return torch.tensor(means, dtype=torch.float64, device="cpu").reshape(len(slots), len(items))


def exam_scores(exam: Exam, window: ExamWindow, proposers: list[str]) -> dict[str, dict[str, float]]:
    """Every examined member's exam signals.

    Args:
        exam: the solvers' sitting.
        window: the proposals since the last event (teachers' validity).
        proposers: the proposing role's member ids (empty, or the solvers themselves, for a single agent).

    Returns:
        {"accuracy": {solver: in [0, 1] over all N problems}, "logprob": {solver: mean nats per token}
        (only when measured), "dev": {solver: accuracy on the dev problems} (only when there are some),
        "separation": {teacher: valid share × share of its examined problems that separate the solvers,
        in [0, 1]}}. With no problems, accuracies are nan.
    """
    accuracy = solve_rates(exam.outcomes)
    scores: dict[str, dict[str, float]] = {"accuracy": dict(zip(exam.members, accuracy.tolist()))}
    if exam.logprob is not None:
        scores["logprob"] = dict(zip(exam.members, exam.logprob.mean(dim=1).tolist()))
    dev = torch.tensor([source == DEV for source in exam.sources], dtype=torch.bool, device="cpu")
    if bool(dev.any()):
        scores["dev"] = dict(zip(exam.members, solve_rates(exam.outcomes[:, dev]).tolist()))
    splits = separating(exam.outcomes)
    separation = {}
    for teacher in proposers:
        if teacher in exam.members:  # a single agent proposes for itself: no teacher score
            continue
        mine = torch.tensor([source == teacher for source in exam.sources], dtype=torch.bool, device="cpu")
        made = window.proposals(teacher)
        valid = sum(e["valid"] for e in window.entries if e["teacher"] == teacher)
        share = float(splits[mine].double().mean()) if bool(mine.any()) else 0.0
        separation[teacher] = (valid / made) * share if made else 0.0
    scores["separation"] = separation
    return scores


def exam_fitness(
    config: FitnessConfig,
    roles: dict[str, str],
    rating: dict[str, float],
    scores: dict,
    solver_role: str,
    proposer_role: str,
) -> dict[str, float]:
    """{id: fitness} from an exam: solvers by ``config.score`` (accuracy or logprob), proposers by their
    separation share, every other member (critics, or a role without a score) by μ − 3σ.

    Args:
        roles: {id: role} of every member; rating: {id: μ − 3σ}; scores: :func:`exam_scores`.
        solver_role, proposer_role: the game's roles (the same one for a single agent).
    """
    solver_scores = scores.get(config.score, scores["accuracy"])
    fitness = {}
    for member, role in roles.items():
        if role == solver_role and member in solver_scores:
            fitness[member] = float(solver_scores[member])
        elif role == proposer_role and member in scores["separation"]:
            fitness[member] = float(scores["separation"][member])
        else:
            fitness[member] = float(rating[member])
    return fitness


def exam_record(run) -> dict:
    """Every member's fitness from a common exam, with its signals and the exam itself.

    Args:
        run: an :class:`evolora.run.Run` (its bank, task, window, dev items, config, population, ratings).

    Returns:
        {"name": "exam", "members": {id: {"role", "rating", "validation" (dev accuracy or None),
        "accuracy", "logprob", "separation" (each when measured), "fitness"}}, "exam": :meth:`Exam.to_dict`}.
    """
    config = run.config.evolution.fitness
    proposers, solvers = run.population.players(run.arm.game)
    items, sources = exam_items(run.exam_window, run.dev_items, config)
    exam = sit_exam(
        run.bank,
        run.tokenizer,
        run.task,
        {m.slot: m.id for m in solvers},
        items,
        sources,
        max_new_tokens=run.config.eval.max_new_tokens,
        batch_size=run.config.eval.batch_size,
        logprob=run.task.reference_solutions,
    )
    scores = exam_scores(exam, run.exam_window, [m.id for m in proposers])
    roles = {m.id: m.role for m in run.population.members}
    rating = {m: run.ratings.conservative(m) for m in roles}
    fitness = exam_fitness(config, roles, rating, scores, run.arm.game.solver, run.arm.game.proposer)
    members = {}
    for member, role in roles.items():
        entry = {"role": role, "rating": rating[member], "validation": scores.get("dev", {}).get(member)}
        entry.update(
            {
                signal: scores[signal][member]
                for signal in ("accuracy", "logprob", "separation")
                if signal in scores and member in scores[signal]
            }
        )
        members[member] = {**entry, "fitness": fitness[member]}
    return {"name": "exam", "members": members, "exam": exam.to_dict()}
