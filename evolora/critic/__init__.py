"""The review game: critics judge the students' answers, and the verifier's grade scores them.

    pairs    = pfsp_pairs(critics, students, ratings)      # each critic picks a student (PFSP)
    reviews  = that student's parsed answers this step, review.reviews of them with both classes
    verdicts = task.parse_verdict(rollout(critics, task.critic_prompt(problem, answer)))  # k per answer
    critic reward  = ± balanced weight of the answer's true class (below); format -> rewards.format
    + review.entropy x the marginal-verdict-entropy bonus (off by default; entropy_bonuses)
    GRPO group     = the k verdicts on one answer (k > 1), advantage x the class weight
    student reward += rewards.refuted (a wrong answer flagged) or rewards.survived (a correct one accepted)

It runs after the teacher → student game of the same step (:attr:`evolora.game.Arm.pipeline`),
only in a run with critics, and adds the critics' samples to that step's outcome. An answer
the grader could not parse (``format``) is not reviewed: it is wrong on its face.

Source: SPC (Self-Play Critic, arXiv 2504.19162): a critic rewarded by agreement with the
ground truth; PopuLoRA (arXiv 2605.16727) §2 (PFSP matchmaking, ratings, per-role evolution).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from evolora.bank import Bank
from evolora.config import RewardConfig, SelfPlayConfig
from evolora.generation.rollout import chat_prompt
from evolora.learner import Sample
from evolora.matchmaking import pfsp_pairs
from evolora.population import Individual
from evolora.selfplay import StepOutcome, to_sample
from evolora.tasks.base import Task

if TYPE_CHECKING:
    from evolora.hf_types import Tokenizer

TRUTH = {"correct": "correct", "wrong": "incorrect"}
"""The verifier's grade label of a reviewed answer -> the verdict a perfect critic gives."""


def balanced_weights(truths: list[str]) -> dict[str, float]:
    """Per true class, the reward magnitude of one review: ``N / (2 · n_class)``.

    With N reviews in a step, n_c of truly correct answers and n_i of truly incorrect ones, a
    review scores ``+w`` when the verdict agrees with the verifier and ``−w`` when it does not,
    ``w = N / (2 n)`` of its answer's class. The step's mean critic reward is then

        (1/N) [n_c w_c (2 TPR − 1) + n_i w_i (2 TNR − 1)] = TPR + TNR − 1 = 2 · balanced accuracy − 1,

    so a critic that always says ``incorrect`` (TPR 0, TNR 1) or always ``correct`` earns exactly 0,
    a coin earns 0 in expectation, and a perfect judge earns 1.

    Worked example: 10 reviews, 2 of correct answers and 8 of wrong ones: w_correct = 10/4 = 2.5,
    w_incorrect = 10/16 = 0.625. Always ``incorrect``: 2 · (−2.5) + 8 · 0.625 = 0; always
    ``correct``: 2 · 2.5 − 8 · 0.625 = 0; perfect: (5 + 5) / 10 = 1 per review.

    A step whose reviews hold one class only gives weight 0 to both (agreement there cannot
    tell a judge from a constant guess).

    Args:
        truths: the true class of every review, each ``"correct"`` or ``"incorrect"``.

    Returns:
        {"correct": w_c, "incorrect": w_i}, each >= 0 (units: reward per review).

    >>> balanced_weights(["correct"] * 2 + ["incorrect"] * 8)
    {'correct': 2.5, 'incorrect': 0.625}
    """
    counts = {label: sum(t == label for t in truths) for label in ("correct", "incorrect")}
    if not all(counts.values()):
        return {label: 0.0 for label in counts}
    return {label: len(truths) / (2 * n) for label, n in counts.items()}


def critic_rewards(verdicts: list[str | None], truths: list[str], rewards: RewardConfig) -> list[float]:
    """Every review's critic reward: ``+w`` when the verdict agrees with the truth, ``−w`` when not
    (:func:`balanced_weights`, over all of the step's reviews), ``rewards.format`` when the
    verdict did not parse (None).

    >>> from evolora.config import RewardConfig
    >>> critic_rewards(["incorrect"] * 4, ["correct", "incorrect", "incorrect", "incorrect"], RewardConfig())
    [-2.0, 0.6666666666666666, 0.6666666666666666, 0.6666666666666666]
    """
    weights = balanced_weights(truths)
    return [
        rewards.format if verdict is None else weights[truth] * (1.0 if verdict == truth else -1.0)
        for verdict, truth in zip(verdicts, truths)
    ]


def survival_bonus(verdict: str | None, truth: str, rewards: RewardConfig) -> float:
    """What one review adds to the student's reward: ``rewards.refuted`` (≤ 0) when a wrong answer was
    flagged ``incorrect``, ``rewards.survived`` (≥ 0) when a correct answer was accepted, else 0."""
    if verdict == truth:
        return rewards.survived if truth == "correct" else rewards.refuted
    return 0.0


@dataclass(frozen=True)
class Review:
    """One critic's verdict on one student attempt (an entry of a game's ``reviews``).

    Attributes:
        critic, student: the ids. game, attempt: indices of the step's game and of the attempt in it.
        truth: the verifier's class, "correct" or "incorrect". verdict: the critic's, or None (format).
        text: the critic's completion (the forced prefix included). reward: its critic reward.
    """

    critic: str
    student: str
    game: int
    attempt: int
    truth: str
    verdict: str | None
    text: str
    reward: float = 0.0

    def to_dict(self) -> dict:
        """The entry written into ``matches.jsonl`` (game index apart: the line is the game)."""
        return {
            "critic": self.critic,
            "attempt": self.attempt,
            "truth": self.truth,
            "verdict": self.verdict,
            "text": self.text,
            "reward": self.reward,
        }


def pick_reviews(truths: list[str], limit: int | None, rng: np.random.Generator) -> list[int]:
    """Which of a critic's candidate answers it reviews: all when ``limit`` is None or covers them,
    else ``limit`` of them, up to ``limit // 2`` from each true class and the rest from the class
    that has more (so both classes are in the batch whenever the candidates hold both).

    Args:
        truths: each candidate's true class, ``"correct"`` or ``"incorrect"``.
        limit: answers to keep (>= 2), or None. rng: draws which ones (one permutation per class).

    Returns:
        The kept indices into ``truths``, ascending.

    >>> pick_reviews(["incorrect"] * 6 + ["correct"], 4, np.random.default_rng(0))[-1]
    6
    """
    if limit is None or len(truths) <= limit:
        return list(range(len(truths)))
    by_class = {label: [i for i, t in enumerate(truths) if t == label] for label in ("correct", "incorrect")}
    take = {label: min(len(items), limit // 2) for label, items in by_class.items()}
    for label, items in by_class.items():  # fill the places the other class could not
        take[label] += min(limit - sum(take.values()), len(items) - take[label])
    kept = [items[j] for label, items in by_class.items() for j in rng.permutation(len(items))[: take[label]]]
    return sorted(kept)


def verdict_sample(completion, review: Review, weight: float, config: SelfPlayConfig, bonus: float = 0.0) -> Sample:
    """The learner's sample of one verdict (``completion``), with k = ``config.review.samples``
    verdicts per answer.

    * k = 1: reward = the review's balanced critic reward ±w, group ``critic:<id>`` (all of the
      critic's reviews of the step share one baseline), weight 1.
    * k > 1: reward = +1 when the verdict agrees with the verifier, −1 when not (``rewards.format``
      when it did not parse), group ``critic:<id>:<game>:<attempt>`` (the k verdicts on one answer),
      weight = ``weight``, the answer's balanced class weight w (:func:`balanced_weights`). The
      advantage is then w · (r − mean_g r) / std_g r: it contrasts verdicts on the same input, is
      exactly 0 for a critic that gave the same verdict k times, and, with w applied after the
      group's std (which would cancel it inside the reward), the expected push of a critic's
      batch towards either verdict is 0 whatever the class mix (Σ_class n_class w_class equal).

    ``bonus`` (:func:`entropy_bonuses`) is added to the sample's reward either way, not to the
    review's recorded reward. ``config.review.std`` False drops the division by std_g r under
    GRPO (:attr:`evolora.learner.Sample.centred`): with two verdicts a group's rewards take two
    values and the std leaves only their order, so a bonus that does not reverse it would be lost.

    Source: GRPO groups of samples on one prompt (arXiv 2402.03300); Dr. GRPO (arXiv 2503.20783);
    SPC (arXiv 2504.19162).
    """
    centred = not config.review.std
    if config.review.samples == 1:
        sample = to_sample(completion, review.reward + bonus, group=f"critic:{review.critic}")
        return replace(sample, centred=True) if centred else sample
    verdict, truth = review.verdict, review.truth
    agreement = config.rewards.format if verdict is None else (1.0 if verdict == truth else -1.0)
    sample = to_sample(completion, agreement + bonus, group=f"critic:{review.critic}:{review.game}:{review.attempt}")
    return replace(sample, weight=weight, centred=centred)


def entropy_bonuses(reviews: list[Review], beta: float) -> list[float]:
    """Each review's marginal-verdict-entropy bonus ``β · (−log q(v) − H(q))``, q = the shares of
    ``correct`` / ``incorrect`` among its critic's parsed verdicts of the step, H(q) their
    entropy (nats); 0 for an unparsed verdict and for every review when β = 0.

    As a REINFORCE reward, −log q(v) has the gradient of H(q̄), the entropy of the critic's verdict
    rate over its inputs (∇H = E[−log q̄(v) ∇log π(v|x)]), not of each verdict (the InfoMax
    objective of discriminative clustering, Krause et al. NeurIPS 2010): within an answer's
    group the rarer verdict gains, which pulls a critic away from a constant verdict, while
    one that says ``correct`` exactly on the correct answers of a balanced batch is not
    penalised. Subtracting H(q) makes the bonuses of a critic's batch sum to 0. Range: each
    value in [−β log 2, β log N] for N parsed verdicts.

    >>> [round(b, 3) for b in entropy_bonuses([Review("c", "s", 0, i, "correct", v, "") for i, v in
    ...  enumerate(["correct"] * 3 + ["incorrect"])], 1.0)]
    [-0.275, -0.275, -0.275, 0.824]
    """
    bonuses = [0.0] * len(reviews)
    if beta == 0:
        return bonuses
    for critic in dict.fromkeys(r.critic for r in reviews):
        index = [i for i, r in enumerate(reviews) if r.critic == critic and r.verdict is not None]
        counts = {v: sum(reviews[i].verdict == v for i in index) for v in ("correct", "incorrect")}
        q = {v: n / len(index) for v, n in counts.items() if n} if index else {}
        entropy = -sum(p * math.log(p) for p in q.values())
        for i in index:
            bonuses[i] = beta * (-math.log(q[reviews[i].verdict]) - entropy)
    return bonuses


def score_reviews(reviews: list[Review], rewards: RewardConfig) -> tuple[list[float], list[float]]:
    """Each review's critic reward (:func:`critic_rewards`) and its class weight
    (:func:`balanced_weights`), balanced over the reviews of its own critic in the step, so that
    every critic's mean reward is its own TPR + TNR − 1 (0 for a constant critic)."""
    scored, weights = [0.0] * len(reviews), [0.0] * len(reviews)
    for critic in dict.fromkeys(r.critic for r in reviews):
        index = [i for i, r in enumerate(reviews) if r.critic == critic]
        truths = [reviews[i].truth for i in index]
        w = balanced_weights(truths)
        for i, value in zip(index, critic_rewards([reviews[i].verdict for i in index], truths, rewards)):
            scored[i], weights[i] = value, w[reviews[i].truth]
    return scored, weights


def review_step(
    bank: Bank,
    tokenizer: Tokenizer,
    task: Task,
    outcome: StepOutcome,
    students: list[Individual],
    critics: list[Individual],
    ratings,
    config: SelfPlayConfig,
    *,
    np_rng: np.random.Generator,
) -> list[Review]:
    """Play the review game on ``outcome`` (the step's teacher → student games) and fold it in.

    Each critic picks a student by PFSP (``config.matchmaking``; p = P(student fools the critic)),
    takes that student's parsed attempts of the step (``config.review.reviews`` of them,
    :func:`pick_reviews`) and samples ``config.review.samples`` = k verdicts on each. In place:
    each game's ``reviews`` (a list, empty when none of its attempts was reviewed), the students'
    rewards and samples (:func:`survival_bonus`, averaged over the k verdicts), ``outcome.samples``
    of every critic (one sample per verdict, :func:`verdict_sample`), ``outcome.rollout`` and
    ``outcome.seconds["rollout_critic"]``. ``np_rng`` draws the reviewed answers and seeds the
    verdict sampling (a torch generator of its own).

    Returns:
        The step's reviews, in (critic pair, game, attempt, verdict) order.
    """
    began = time.perf_counter()
    mm, games, k = config.matchmaking, outcome.games, config.review.samples
    pairs = pfsp_pairs(
        [c.id for c in critics],
        [s.id for s in students],
        ratings,
        weighting=mm.weighting,
        k=mm.k,
        scheme=mm.scheme,
        rng=np_rng,
    )
    todo = []
    for critic, student in pairs:
        candidates = [
            (g, a)
            for g, game in enumerate(games)
            if game.student == student
            for a, label in enumerate(game.grades)
            if label in TRUTH
        ]
        truths = [TRUTH[games[g].grades[a]] for g, a in candidates]
        todo += [
            (critic, *candidates[i]) for i in pick_reviews(truths, config.review.reviews, np_rng) for _ in range(k)
        ]
    prompts = [
        chat_prompt(tokenizer, task.critic_prompt(games[g].problem, games[g].attempts[a]), task.critic_prefix)
        for _, g, a in todo
    ]
    slot = {c.id: c.slot for c in critics}
    generator = torch.Generator(device="cpu").manual_seed(int(np_rng.integers(2**62)))  # the bank seeds its device's
    done = (
        bank.rollout(
            prompts,
            [slot[c] for c, _, _ in todo],
            config.sampling("critic"),
            batch_size=config.generation_batch_size,
            stats=outcome.rollout,
            generator=generator,
        )
        if todo
        else []
    )
    texts = [task.critic_prefix + completion.text for completion in done]
    reviews = [
        Review(critic, games[g].student, g, a, TRUTH[games[g].grades[a]], task.parse_verdict(text), text)
        for (critic, g, a), text in zip(todo, texts)
    ]
    rewards, weights = score_reviews(reviews, config.rewards)
    reviews = [replace(review, reward=reward) for review, reward in zip(reviews, rewards)]
    bonuses = entropy_bonuses(reviews, config.review.entropy)
    for critic in critics:
        outcome.samples[critic.id] = []
    for review, completion, weight, bonus in zip(reviews, done, weights, bonuses):
        outcome.samples[review.critic].append(verdict_sample(completion, review, weight, config, bonus))
    _fold_into_games(outcome, reviews, config.rewards, k)
    outcome.seconds["rollout_critic"] = time.perf_counter() - began
    return reviews


def _fold_into_games(outcome: StepOutcome, reviews: list[Review], rewards: RewardConfig, samples: int = 1) -> None:
    """Give every game its ``reviews`` and add each review's survival bonus, divided by the
    ``samples`` verdicts per answer, to the attempt's student reward and sample (the samples of a
    student follow its games' attempts in order)."""
    games = outcome.games
    for game in games:
        game.reviews = []
    index: dict[tuple[int, int], int] = {}
    seen: dict[str, int] = {}
    for g, game in enumerate(games):
        for k in range(len(game.attempts)):
            index[(g, k)] = seen.get(game.student, 0)
            seen[game.student] = index[(g, k)] + 1
    for review in reviews:
        game = games[review.game]
        game.reviews.append(review.to_dict())
        bonus = survival_bonus(review.verdict, review.truth, rewards)
        if bonus:
            bonus = bonus if samples == 1 else bonus / samples
            game.student_rewards[review.attempt] += bonus
            samples_of: list[Sample] = outcome.samples[game.student]
            i = index[(review.game, review.attempt)]
            samples_of[i] = replace(samples_of[i], reward=samples_of[i].reward + bonus)


def review_rates(reviews: list[Review]) -> dict[tuple[str, str], float]:
    """Each (student, critic) pair's balanced accuracy over its reviews (:func:`balanced_accuracy`;
    the plain agreement rate when they hold one true class only; a format verdict counts as a
    misjudgement): the critic's "solve rate" in its rated match, where the student wins when the
    critic misjudges it more often than the ratings expect. Balanced, so that a critic that
    always says ``incorrect`` to a mostly wrong student does not win its matches (and evolution's
    selection by rating) by the class mix alone."""
    pairs: dict[tuple[str, str], list[Review]] = {}
    for review in reviews:
        pairs.setdefault((review.student, review.critic), []).append(review)
    rates = {}
    for pair, mine in pairs.items():
        verdicts, truths = [r.verdict for r in mine], [r.truth for r in mine]
        balanced = balanced_accuracy(verdicts, truths)
        rates[pair] = balanced if balanced is not None else sum(v == t for v, t in zip(verdicts, truths)) / len(mine)
    return rates


def balanced_accuracy(verdicts: list[str | None], truths: list[str]) -> float | None:
    """Mean over the two true classes of the share of verdicts that agree with the truth, in [0, 1];
    an unparsed verdict (None) counts as a miss. None unless both classes occur.

    >>> balanced_accuracy(["correct", "correct", None], ["correct", "incorrect", "incorrect"])
    0.5
    """
    per_class = [[v == t for v, t in zip(verdicts, truths) if t == label] for label in ("correct", "incorrect")]
    return sum(sum(c) / len(c) for c in per_class) / 2 if all(per_class) else None


def review_summary(reviews: list[Review]) -> dict:
    """The step record's ``critic`` section: reviews (verdicts), verdict parse rate, agreement,
    balanced accuracy (mean of the per-class agreement; None without both classes), mean critic
    reward, the share of reviews whose answer was truly correct, the share of verdicts that said
    ``correct``, and ``contested``: the share of (critic, answer) pairs whose verdicts differ
    (0 with one verdict per answer; the answers whose GRPO group carries an advantage), and
    ``per_critic``: {critic: its balanced accuracy, said_correct and truly_correct}."""
    if not reviews:
        return {
            "reviews": 0,
            "parse_rate": None,
            "agreement": None,
            "balanced_accuracy": None,
            "reward": None,
            "truly_correct": None,
            "said_correct": None,
            "contested": None,
            "per_critic": {},
        }
    truths = [r.truth for r in reviews]
    answers: dict[tuple[str, int, int], set] = {}
    for r in reviews:
        answers.setdefault((r.critic, r.game, r.attempt), set()).add(r.verdict)
    return {
        "reviews": len(reviews),
        "parse_rate": sum(r.verdict is not None for r in reviews) / len(reviews),
        "agreement": sum(r.verdict == r.truth for r in reviews) / len(reviews),
        "balanced_accuracy": balanced_accuracy([r.verdict for r in reviews], truths),
        "reward": sum(r.reward for r in reviews) / len(reviews),
        "truly_correct": truths.count("correct") / len(reviews),
        "said_correct": sum(r.verdict == "correct" for r in reviews) / len(reviews),
        "contested": sum(len(v) > 1 for v in answers.values()) / len(answers),
        "per_critic": {
            critic: _critic_line([r for r in reviews if r.critic == critic])
            for critic in dict.fromkeys(r.critic for r in reviews)
        },
    }


def _critic_line(reviews: list[Review]) -> dict:
    """One critic's balanced accuracy (None without both classes), share of ``correct`` verdicts and
    of truly correct answers among its reviews of the step: the balanced accuracy over all
    critics mixes critics that saw different class mixes and can exceed every one of theirs."""
    return {
        "balanced_accuracy": balanced_accuracy([r.verdict for r in reviews], [r.truth for r in reviews]),
        "said_correct": sum(r.verdict == "correct" for r in reviews) / len(reviews),
        "truly_correct": sum(r.truth == "correct" for r in reviews) / len(reviews),
    }
