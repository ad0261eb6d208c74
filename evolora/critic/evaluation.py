"""Held-out critic evaluation: how well critics judge answers, and what judging buys at inference.

    answers  = n sampled answers (and one greedy) per held-out problem, from the base and each student
    truth    = the verifier's grade of each answer (format answers are not judged)
    verdicts = greedy verdict of each judge (the base as critic, then each critic) on each answer
    scores   = log π(" correct") − log π(" incorrect") after "Verdict:" (teacher-forced, both cases)
    balanced accuracy and AUC of the scores per judge; per answerer: greedy, single sample,
    majority-of-n, best-of-n by a judge (the first of the n samples it accepts; the first sample
    when it accepts none) and best-of-n by a judge's score (the sample it scores highest)

Source: SPC (Self-Play Critic, arXiv 2504.19162) for critics judging solutions; best-of-n
reranking by a verifier model (Cobbe et al., arXiv 2110.14168); PopuLoRA (arXiv 2605.16727) §4
for the held-out protocol (the base model as the reference).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from evolora.bank import Bank
from evolora.critic import TRUTH, balanced_accuracy
from evolora.generation.rollout import chat_prompt
from evolora.generation.routed import BASE
from evolora.generation.types import Sampling
from evolora.tasks.base import Task

if TYPE_CHECKING:
    from evolora.hf_types import Tokenizer


def critic_evaluation(
    bank: Bank,
    tokenizer: Tokenizer,
    task: Task,
    answerers: dict[str, str],
    judges: dict[str, str],
    *,
    limit: int,
    n: int,
    sampling: Sampling,
    max_new_tokens: int,
    critic_max_new_tokens: int,
    batch_size: int | None,
    seed: int,
) -> dict:
    """Judge held-out answers with every judge and rerank each answerer's samples.

    Args:
        bank: the :class:`evolora.bank.local.AdapterBank` or a Ray :class:`evolora.distributed.sharded_bank.ShardedBank`
            (rollouts and verdict scores through the bank protocol). answerers, judges: {bank slot: id}; the
            base (slot ``"__base__"``, id ``"base"``) is added first to each as the reference.
        limit: held-out problems (``task.held_out(limit, random.Random(seed))``). n: samples per
            problem and answerer, >= 1. sampling: the sampled answers' (its temperature and top-p;
            its token cap is ``max_new_tokens``).
        max_new_tokens, critic_max_new_tokens: caps of an answer and of a verdict (after the
            forced :attr:`Task.critic_prefix`). batch_size: rows per ``generate`` call.
        seed: drives the problem draw and the answer sampling (a torch generator of its own).

    Returns:
        {} when the task has no held-out data or ``limit`` is 0; else {"problems", "n",
        "judges": {judge: {"reviews", "parse_rate", "balanced_accuracy", "auc"}}, "answerers":
        {answerer: {"greedy", "single", "majority", "best_of_n": {judge: accuracy},
        "best_of_n_score": {judge: accuracy}}}}; every accuracy is a fraction in [0, 1] (None
        without both classes for balanced accuracy and AUC, :func:`auc` of :func:`verdict_scores`).
    """
    items = task.held_out(limit, random.Random(seed)) if limit else None
    if not items:
        return {}
    answerers, judges = {BASE: "base", **answerers}, {BASE: "base", **judges}
    batch_size = batch_size or bank.batch_size  # None (eval.batch_size unset): the engine's, by device
    prompts = [chat_prompt(tokenizer, task.held_out_prompt(item)) for item in items]
    rows = [(slot, i) for slot in answerers for i in range(len(items)) for _ in range(n)]
    sampled = bank.rollout(
        [prompts[i] for _, i in rows],
        [s for s, _ in rows],
        replace(sampling, max_new_tokens=max_new_tokens, greedy=False, stop=()),
        batch_size=batch_size,
        generator=torch.Generator(device="cpu").manual_seed(seed),
    )
    grades = task.grade_held_out([c.text for c in sampled], [items[i] for _, i in rows])
    greedy_rows = [(slot, i) for slot in answerers for i in range(len(items))]
    greedy = bank.rollout(
        [prompts[i] for _, i in greedy_rows],
        [s for s, _ in greedy_rows],
        Sampling(max_new_tokens=max_new_tokens, greedy=True),
        batch_size=batch_size,
    )
    greedy_grades = task.grade_held_out([c.text for c in greedy], [items[i] for _, i in greedy_rows])
    judged = [r for r, grade in enumerate(grades) if grade.label in TRUTH]
    pairs = [(items[rows[r][1]].question, sampled[r].text) for r in judged]
    verdicts = _verdicts(
        bank, tokenizer, task, judges, pairs, max_new_tokens=critic_max_new_tokens, batch_size=batch_size
    )
    scores = verdict_scores(bank, tokenizer, task, judges, pairs, batch_size=batch_size)
    by_row = {judge: dict(zip(judged, verdicts[judge])) for judge in verdicts}
    score_of = {judge: dict(zip(judged, scores[judge])) for judge in scores}
    truths = [TRUTH[grades[r].label] for r in judged]
    result = {
        "problems": len(items),
        "n": n,
        "answerers": {},
        "judges": {
            judge: {
                **_judge_scores(verdicts[judge], truths),
                "auc": auc(scores[judge], truths) if judge in scores else None,
            }
            for judge in verdicts
        },
    }
    for slot, name in answerers.items():
        mine = [r for r, (s, _) in enumerate(rows) if s == slot]
        groups = [mine[i * n : (i + 1) * n] for i in range(len(items))]
        result["answerers"][name] = {
            "greedy": sum(g.label == "correct" for (s, _), g in zip(greedy_rows, greedy_grades) if s == slot)
            / len(items),
            "single": sum(grades[r].label == "correct" for r in mine) / len(mine),
            "majority": sum(grades[_majority(group, grades)].label == "correct" for group in groups) / len(items),
            "best_of_n": {
                judge: sum(grades[_accepted(group, by_row[judge])].label == "correct" for group in groups) / len(items)
                for judge in by_row
            },
            "best_of_n_score": {
                judge: sum(grades[_top(group, score_of[judge])].label == "correct" for group in groups) / len(items)
                for judge in score_of
            },
        }
    return result


VERDICT_WORDS = ((" correct", " Correct"), (" incorrect", " Incorrect"))
"""The continuations after :attr:`Task.critic_prefix` a verdict score compares (both cases occur)."""


@torch.no_grad()
def verdict_scores(
    bank: Bank,
    tokenizer: Tokenizer,
    task: Task,
    judges: dict[str, str],
    reviews: list[tuple[str, str]],
    *,
    batch_size: int,
) -> dict[str, list[float]]:
    """{judge id: its score of each (problem, answer)}: log Σ π(" correct" | " Correct") − log Σ
    π(" incorrect" | " Incorrect") after the forced prefix, teacher-forced (nats; > 0: it leans
    to ``correct``). A threshold-free reading of the judge: it ranks answers even when its greedy
    verdict is the same on all of them. Deterministic (no sampling). ``bank``: any bank of the
    protocol (:meth:`evolora.bank.local.AdapterBank.logprobs`; on Ray each judge's rows run on
    its worker, :meth:`evolora.distributed.sharded_bank.ShardedBank.logprobs`)."""
    from evolora.learner import Sample

    prompts = [
        tuple(chat_prompt(tokenizer, task.critic_prompt(problem, answer), task.critic_prefix))
        for problem, answer in reviews
    ]
    words = [tuple(tokenizer(w, add_special_tokens=False)["input_ids"]) for pair in VERDICT_WORDS for w in pair]
    rows = [(slot, j, w) for slot in judges for j in range(len(reviews)) for w in range(len(words))]
    values: list[float] = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]  # a (judge, review)'s 4 words share its prompt's prefill
        logp = bank.logprobs(
            [slot for slot, _, _ in chunk], [Sample(prompts[j], words[w], 0.0, "") for _, j, w in chunk]
        )
        values += logp.sum(dim=1).tolist()  # 0 on padding; every word token is scored
    table = torch.tensor(values, device="cpu").reshape(len(judges), len(reviews), 2, 2)  # judge, review, verdict, case
    score = torch.logsumexp(table[:, :, 0], dim=-1) - torch.logsumexp(table[:, :, 1], dim=-1)
    return {name: score[i].tolist() for i, name in enumerate(judges.values())}


def auc(scores: list[float], truths: list[str]) -> float | None:
    """P(score of a truly correct answer > score of a truly incorrect one), ties counting one half
    (Mann-Whitney), in [0, 1]: 0.5 for a judge that cannot rank them. None without both classes.

    >>> auc([2.0, 1.0, 1.0, -1.0], ["correct", "correct", "incorrect", "incorrect"])
    0.875
    """
    pos = [s for s, t in zip(scores, truths) if t == "correct"]
    neg = [s for s, t in zip(scores, truths) if t == "incorrect"]
    if not pos or not neg:
        return None
    return sum((p > q) + 0.5 * (p == q) for p in pos for q in neg) / (len(pos) * len(neg))


def _top(group: list[int], scores: dict[int, float]) -> int:
    """The row of ``group`` with the highest score (ties: the first); the first row when none was judged."""
    judged = [r for r in group if r in scores]
    return max(judged, key=lambda r: scores[r]) if judged else group[0]


def _verdicts(
    bank: Bank,
    tokenizer: Tokenizer,
    task: Task,
    judges: dict[str, str],
    reviews: list[tuple[str, str]],
    *,
    max_new_tokens: int,
    batch_size: int,
) -> dict[str, list[str | None]]:
    """{judge id: its greedy verdict on each (problem, answer), in order}."""
    prompts = [
        chat_prompt(tokenizer, task.critic_prompt(problem, answer), task.critic_prefix) for problem, answer in reviews
    ]
    rows = [(slot, j) for slot in judges for j in range(len(reviews))]
    done = (
        bank.rollout(
            [prompts[j] for _, j in rows],
            [s for s, _ in rows],
            Sampling(max_new_tokens=max_new_tokens, greedy=True, stop=("\n",)),
            batch_size=batch_size,
        )
        if rows
        else []
    )
    out: dict[str, list[str | None]] = {name: [] for name in judges.values()}
    for (slot, _), completion in zip(rows, done):
        out[judges[slot]].append(task.parse_verdict(task.critic_prefix + completion.text))
    return out


def _judge_scores(verdicts: list[str | None], truths: list[str]) -> dict:
    """Reviews, verdict parse rate and balanced accuracy (mean per-class agreement; None without both classes)."""
    return {
        "reviews": len(truths),
        "parse_rate": sum(v is not None for v in verdicts) / len(verdicts) if verdicts else None,
        "balanced_accuracy": balanced_accuracy(verdicts, truths),
    }


def _majority(group: list[int], grades) -> int:
    """The row of the most common parsed answer among ``group`` (ties: the one seen first;
    the first row when none parsed)."""
    keys = [repr(grades[r].predicted) for r in group if grades[r].label != "format"]
    if not keys:
        return group[0]
    counts = Counter(keys)
    top = max(counts.values())
    winner = next(k for k in keys if counts[k] == top)
    return next(r for r in group if grades[r].label != "format" and repr(grades[r].predicted) == winner)


def _accepted(group: list[int], verdicts: dict[int, str | None]) -> int:
    """The first row of ``group`` the judge called ``correct``; the first row when it accepted none."""
    return next((r for r in group if verdicts.get(r) == "correct"), group[0])
