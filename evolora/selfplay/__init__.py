"""One self-play game step between teachers and students, and its rewards.

    pairs    = pfsp_pairs(teachers, students, ratings)         # matchmaking
    problems = rollout(teachers, task.proposal_prompt)          # all teachers in one batch
    verdicts = task.verify(problems)                            # sandboxed
    answers  = rollout(students, task.solve_prompt, n)          # n samples per valid problem
    grades   = task.grade(answers)
    rewards  = teacher: learnability 1 − ŝ; student: correctness  (AZR-style composite)

The function returns every sample with its reward; the caller trains and rates.
Source: PopuLoRA (arXiv 2605.16727) §2 steps 1-4; AZR (arXiv 2505.03335) rewards.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from evolora.bank import Bank
from evolora.config import RewardConfig, SelfPlayConfig
from evolora.generation.rollout import Completion, RolloutStats, chat_prompt
from evolora.learner import Sample
from evolora.matchmaking import pfsp_pairs
from evolora.population import Individual
from evolora.selfplay.agreement import gate_by_agreement
from evolora.selfplay.guidance import add_guidance
from evolora.selfplay.memory import ProblemMemory, same_answer
from evolora.tasks.base import ProposalRequest, Task, normalise_problem

if TYPE_CHECKING:
    from evolora.hf_types import Tokenizer


def proposal_request(task: Task, rng: random.Random) -> ProposalRequest:
    """One teacher prompt: its messages, forced start, shown examples and segment structure
    (:meth:`evolora.tasks.base.Task.proposal_request`)."""
    return task.proposal_request(rng)


def repetition_penalties(problems: list[str | None], coefficient: float) -> list[float]:
    """R-Zero's clustered repetition penalty for one step's proposals.

    A proposal whose normalised problem (:func:`evolora.tasks.base.normalise_problem`)
    occurs k times among the N proposals loses ``coefficient · (k − 1) / (N − 1)``
    (unique ones lose nothing; None entries, unparsed proposals, pay nothing but count in N).

    Shapes: N problems in, N penalties (>= 0, reward units) out.
    Source: R-Zero (arXiv 2508.05004) §3, with exact-match clusters instead of BLEU clusters.

    >>> repetition_penalties(["7 + 5", "7+5", "8 * 2"], 1.0), repetition_penalties(["1", None], 1.0)
    ([0.5, 0.5, 0.0], [0.0, 0.0])
    """
    keys = [normalise_problem(p) if p is not None else None for p in problems]
    counts = Counter(k for k in keys if k is not None)
    others = max(len(problems) - 1, 1)
    return [coefficient * (counts[k] - 1) / others if k is not None else 0.0 for k in keys]


def teacher_reward(
    solve_rate: float | None, rewards: RewardConfig, *, parsed: bool = True, copied: bool = False
) -> float:
    """Teacher reward for one proposal (AZR-style composite).

    Args:
        solve_rate: the matched student's solve rate ŝ ∈ [0, 1] on it; None when invalid.
        parsed: False when the proposal did not even parse (a format error).
        copied: True when the valid proposal equals a reference example of its own prompt.

    Returns:
        ``rewards.malformed`` when unparsable; ``rewards.invalid`` when it parses but fails
        verification; a copied example ``rewards.copied`` (``rewards.trivial`` when that is
        None); 1 − ŝ when 0 < ŝ < 1; ``rewards.trivial`` when ŝ ∈ {0, 1}.
    """
    if not parsed:
        return rewards.malformed
    if solve_rate is None:
        return rewards.invalid
    if copied:
        return rewards.trivial if rewards.copied is None else rewards.copied
    if solve_rate <= 0.0 or solve_rate >= 1.0:
        return rewards.trivial
    return 1.0 - solve_rate


def student_reward(label: str, rewards: RewardConfig) -> float:
    """Student reward for one graded answer: correct / wrong / format (see :class:`RewardConfig`)."""
    return {"correct": rewards.correct, "wrong": rewards.wrong, "format": rewards.format}[label]


@dataclass
class GameRecord:
    """One proposal and everything that happened to it (a line of ``matches.jsonl``)."""

    teacher: str
    student: str
    proposal_text: str
    problem: str | None
    program: str | None
    valid: bool
    reason: str
    answer: Any  # the verifier's ground truth, JSON-serialisable (float, or a dict for ``code``)
    attempts: list[str] = field(default_factory=list)
    grades: list[str] = field(default_factory=list)
    solve_rate: float | None = None
    teacher_reward: float = 0.0
    student_rewards: list[float] = field(default_factory=list)
    copied: bool = False  # the problem equals a reference example of the teacher's own prompt
    repetition_penalty: float = 0.0  # R-Zero penalty subtracted from teacher_reward
    reviews: list[dict] | None = None  # the critics' verdicts on its attempts (None: the run has no critics)
    guided: bool = False  # a reference answer joined the student's group (evolora.selfplay.guidance)
    agreement: float | None = None  # share of the agreement gate's solver answers that reach the answer

    def to_dict(self) -> dict:
        """The ``matches.jsonl`` line (``step`` apart); ``reviews`` only in a run with critics."""
        record = asdict(self)
        if self.reviews is None:
            del record["reviews"]
        return record


@dataclass
class StepOutcome:
    """Everything one self-play step produced, before training."""

    samples: dict[str, list[Sample]]  # individual id -> its samples
    games: list[GameRecord]
    pairs: list[tuple[str, str]]
    pair_solve_rates: dict[tuple[str, str], float | None]
    seconds: dict[str, float]
    rollout: RolloutStats


def play_step(
    bank: Bank,
    tokenizer: Tokenizer,
    task: Task,
    proposers: list[Individual],
    solvers: list[Individual],
    ratings,
    config: SelfPlayConfig,
    *,
    rng: random.Random,
    np_rng: np.random.Generator,
    frozen: list[Individual] = (),
    memory: ProblemMemory | None = None,
    step: int = 0,
) -> StepOutcome:
    """Play one step of proposer-vs-solver games (teachers vs students) and compute every sample's reward.

    Args:
        bank, tokenizer: the :class:`evolora.bank.local.AdapterBank` and the base's tokenizer.
        task: the game (prompts, parsing, verifier, grading).
        proposers, solvers: the members on each side of the game (:class:`evolora.game.Game`):
            teachers and students, or the same one-element list when one agent plays both sides
            (it solves its own problems, AZR arXiv 2505.03335).
        ratings: :class:`evolora.ratings.Ratings` used by PFSP matchmaking.
        config: self-play settings (batch sizes, n, per-role sampling, rewards, matchmaking).
        rng: Python RNG for prompt construction; np_rng: NumPy RNG for matchmaking.
            Rollouts sample with torch's global RNG (the caller seeds it).
        frozen: hall-of-fame solver snapshots, a proposer's opponent with probability
            ``config.matchmaking.hall_prob``; they play but are not trained.
        memory: the run's :class:`evolora.selfplay.memory.ProblemMemory` (None: no memory across
            steps): a valid question that had another answer before becomes invalid
            (``inconsistent_answer``), a problem proposed in its window pays the full repetition
            penalty; the step's proposals are recorded in it. ``step``: this step's number.

    Returns:
        A :class:`StepOutcome` with samples per individual id (proposers: one per proposal,
        group = the proposer; solvers: n per valid problem, group = the problem).
    """
    seconds, stats = {}, RolloutStats()
    pairs, opponents = _matchmake(proposers, solvers, ratings, config.matchmaking, np_rng, frozen)
    slot_of = {m.id: m.slot for m in [*proposers, *solvers, *frozen]}

    began = time.perf_counter()
    owners = [t.id for t in proposers for _ in range(config.proposals_per_teacher)]
    # proposal j goes to the teacher's j-th opponent, cyclically
    rivals = [opponents[t.id][j % len(opponents[t.id])] for t in proposers for j in range(config.proposals_per_teacher)]
    requests = (
        [proposal_request(task, rng) for _ in owners]
        if config.teacher_prompt == "per_proposal"
        else [r for _ in proposers for r in [proposal_request(task, rng)] * config.proposals_per_teacher]
    )
    proposals_out = _teacher_rollout(bank, tokenizer, requests, [slot_of[o] for o in owners], config, stats)
    seconds["rollout_teacher"] = time.perf_counter() - began

    began, parsed = (
        time.perf_counter(),
        [task.parse_proposal(r.prefix + c.text) for r, c in zip(requests, proposals_out)],
    )
    verdicts = task.verify(parsed)
    seconds["verify"] = time.perf_counter() - began
    games = [_game(*row) for row in zip(owners, rivals, requests, proposals_out, parsed, verdicts)]
    recent = _check_memory(games, memory, step)
    gate_by_agreement(bank, tokenizer, task, games, config, stats)

    began = time.perf_counter()
    solve_rows = [g for g, game in enumerate(games) if game.valid for _ in range(config.samples_per_problem)]
    prompts = {g: chat_prompt(tokenizer, task.solve_prompt(games[g].problem)) for g in dict.fromkeys(solve_rows)}
    attempts = (
        bank.rollout(
            [prompts[g] for g in solve_rows],
            [slot_of[games[g].student] for g in solve_rows],
            config.sampling("student", stop=(*config.roles["student"].stop, *task.answer_stop)),
            batch_size=config.generation_batch_size,
            stats=stats,
        )
        if solve_rows
        else []
    )
    seconds["rollout_student"] = time.perf_counter() - began

    samples = _score(
        task,
        games,
        solve_rows,
        attempts,
        proposals_out,
        config.rewards,
        [m.id for m in [*proposers, *solvers, *frozen]],
        recent,
    )
    if config.guidance != "none":
        firsts = {g: attempt.prompt_ids for g, attempt in zip(solve_rows, attempts)}
        add_guidance(task, tokenizer, games, firsts, samples, config.guidance, config.rewards.correct)
    return StepOutcome(samples, games, pairs, _pair_solve_rates(pairs, games), seconds, stats)


def _game(
    teacher: str, student: str, request: ProposalRequest, completion: Completion, proposal, verdict
) -> GameRecord:
    """The record of one proposal before the student plays it (``copied``: it equals an example of its prompt)."""
    return GameRecord(
        teacher=teacher,
        student=student,
        proposal_text=request.prefix + completion.text,
        problem=proposal.problem if proposal else None,
        program=proposal.program if proposal else None,
        valid=verdict.valid,
        reason=verdict.reason,
        answer=verdict.answer,
        copied=proposal is not None
        and normalise_problem(proposal.problem) in {normalise_problem(e) for e in request.examples},
    )


def _matchmake(proposers, solvers, ratings, mm, np_rng, frozen) -> tuple[list[tuple[str, str]], dict[str, list[str]]]:
    """PFSP pairs (some opponents swapped for hall-of-fame snapshots) and each teacher's opponents."""
    pairs = pfsp_pairs(
        [t.id for t in proposers],
        [s.id for s in solvers],
        ratings,
        weighting=mm.weighting,
        k=mm.k,
        scheme=mm.scheme,
        rng=np_rng,
    )
    if frozen:  # the hall of fame: past champions as frozen opponents (AlphaStar league)
        pairs = [
            (t, frozen[int(np_rng.integers(len(frozen)))].id if np_rng.random() < mm.hall_prob else s) for t, s in pairs
        ]
    opponents: dict[str, list[str]] = {}
    for teacher_id, student_id in pairs:
        opponents.setdefault(teacher_id, []).append(student_id)  # round_robin: all solvers
    return pairs, opponents


def _check_memory(games: list[GameRecord], memory: ProblemMemory | None, step: int) -> list[bool]:
    """Invalidate valid games whose question had another answer before (in the run or earlier in
    this step), record the step's proposals in ``memory``, and return which were proposed recently."""
    if memory is None:
        return [False] * len(games)
    keys = [normalise_problem(g.problem) if g.problem is not None else None for g in games]
    recent = [memory.recent(key, step) for key in keys]
    truth: dict[str, object] = {}
    for game, key in zip(games, keys):
        if game.valid and (
            memory.conflicts(key, game.answer) or (key in truth and not same_answer(truth[key], game.answer))
        ):
            game.valid, game.reason = False, "inconsistent_answer"
        elif game.valid:
            truth.setdefault(key, game.answer)
    memory.record(step, [(key, g.valid, g.answer) for key, g in zip(keys, games)])
    return recent


def _score(
    task: Task,
    games: list[GameRecord],
    solve_rows: list[int],
    attempts: list[Completion],
    proposals: list[Completion],
    rewards: RewardConfig,
    ids: list[str],
    recent: list[bool] | None = None,
) -> dict[str, list[Sample]]:
    """Grade every attempt, reward students and teachers (repetition rule included: the full λ for
    a problem proposed in the memory's window, ``recent``), fill the games in place and return
    each individual's samples."""
    samples: dict[str, list[Sample]] = {i: [] for i in ids}
    for g, attempt in zip(solve_rows, attempts):
        game = games[g]
        grade = task.grade(attempt.text, game.answer)
        reward = student_reward(grade.label, rewards)
        game.attempts.append(attempt.text)
        game.grades.append(grade.label)
        game.student_rewards.append(reward)
        samples[game.student].append(to_sample(attempt, reward, group=f"problem{g}"))
    penalties = repetition_penalties([g.problem for g in games], rewards.repetition)
    if recent is not None:
        penalties = [rewards.repetition if seen else p for p, seen in zip(penalties, recent)]
    for game, completion, penalty in zip(games, proposals, penalties):
        if game.valid:
            game.solve_rate = sum(label == "correct" for label in game.grades) / len(game.grades)
        game.repetition_penalty = penalty
        game.teacher_reward = (
            teacher_reward(
                game.solve_rate if game.valid else None, rewards, parsed=game.problem is not None, copied=game.copied
            )
            - penalty
        )
        samples[game.teacher].append(to_sample(completion, game.teacher_reward, group=f"teacher:{game.teacher}"))
    return samples


def _pair_solve_rates(pairs: list[tuple[str, str]], games: list[GameRecord]) -> dict[tuple[str, str], float | None]:
    """Solve rate of every (teacher, student) pair over this step's graded attempts (None: no attempt)."""
    rates: dict[tuple[str, str], float | None] = {}
    for teacher_id, student_id in pairs:
        grades = [
            label
            for game in games
            if game.teacher == teacher_id and game.student == student_id
            for label in game.grades
        ]
        rates[(teacher_id, student_id)] = sum(label == "correct" for label in grades) / len(grades) if grades else None
    return rates


def _teacher_rollout(
    bank: Bank,
    tokenizer: Tokenizer,
    requests: list[ProposalRequest],
    slots: list[str],
    config: SelfPlayConfig,
    stats: RolloutStats,
) -> list[Completion]:
    """Every teacher completion, in request order: free-form rows in one batched ``generate``,
    structured rows (the same ``segments``) in another (both by ``bank.rollout``, the engine's segments)."""
    prompts = [chat_prompt(tokenizer, request.messages, request.prefix) for request in requests]
    out: list[Completion | None] = [None] * len(requests)
    for segments in dict.fromkeys(r.segments for r in requests):
        rows = [i for i, r in enumerate(requests) if r.segments == segments]
        sampling = config.sampling("teacher", stop=() if segments else config.roles["teacher"].stop)
        done = bank.rollout(
            [prompts[i] for i in rows],
            [slots[i] for i in rows],
            sampling,
            segments=segments,
            batch_size=config.generation_batch_size,
            stats=stats,
        )
        for i, completion in zip(rows, done):
            out[i] = completion
    return out  # type: ignore[return-value]


def to_sample(completion: Completion, reward: float, group: str) -> Sample:
    """The learner's :class:`evolora.learner.Sample` of one completion (an empty one trains on a single pad token)."""
    if not completion.completion_ids:
        return Sample(prompt_ids=completion.prompt_ids, completion_ids=(0,), reward=reward, group=group)
    return Sample(
        prompt_ids=completion.prompt_ids,
        completion_ids=completion.completion_ids,
        reward=reward,
        group=group,
        mask=completion.mask,
    )
