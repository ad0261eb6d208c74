"""The record of one step: the line of ``metrics.jsonl`` that the loggers, reports and resumes read.

Rates (validity, solve, format errors), rewards per side, verdict reasons, losses, ratings,
births, throughput and memory, and the arms-race metrics of PopuLoRA §4 (proposal complexity,
coverage, matchups, response lengths, token entropy). Record keys name the game's sides
(proposer ``teacher``, solver ``student``) in every arm. Source: PopuLoRA (arXiv 2605.16727) §4.
"""

from __future__ import annotations

import resource

from evolora import metrics


def step_record(
    step: int,
    outcome,
    updates: dict,
    outcomes,
    births: list,
    seconds: dict,
    roles: dict[str, str],
    *,
    members,
    ratings,
    coverage: int,
    complexity_kind: str,
) -> dict:
    """The ``metrics.jsonl`` record of ``step``.

    Args:
        outcome: the step's :class:`evolora.selfplay.StepOutcome`; updates: {id: UpdateResult};
            outcomes: the rated match outcomes; births: :class:`evolora.evolution.Birth` list;
            seconds: wall seconds per phase; roles: {id: role} of the members who played the game
            (its response lengths are theirs).
        members: the population's members after the step; ratings: :class:`evolora.ratings.Ratings`.
        coverage: distinct problem signatures so far; complexity_kind: the task's ``complexity_kind``.
    """
    games = outcome.games
    valid = [g for g in games if g.valid]
    grades = [label for g in games for label in g.grades]
    reasons: dict[str, int] = {}
    for game in games:
        reasons[game.reason] = reasons.get(game.reason, 0) + 1
    rewards = {"teacher": [g.teacher_reward for g in games], "student": [r for g in games for r in g.student_rewards]}
    return {
        "step": step,
        "games": len(games),
        "validity_rate": len(valid) / len(games) if games else 0.0,
        "solve_rate": sum(x == "correct" for x in grades) / len(grades) if grades else None,
        "graded": len(grades),  # student attempts on valid problems, and the correct ones among them
        "correct": sum(x == "correct" for x in grades),
        "learnable": sum(g.solve_rate is not None and 0 < g.solve_rate < 1 for g in valid),
        "format_error_rate": sum(x == "format" for x in grades) / len(grades) if grades else None,
        "pair_solve_rates": {f"{t}|{s}": r for (t, s), r in outcome.pair_solve_rates.items()},
        "match_outcomes": outcomes,
        "reward": {role: (sum(v) / len(v) if v else None) for role, v in rewards.items()},
        "verdicts": reasons,
        "guided": sum(g.guided for g in games),  # reference answers in student groups (selfplay.guidance)
        "loss": {i: u.loss for i, u in updates.items() if u.samples},
        "trained_samples": {i: u.samples for i, u in updates.items()},
        "rollouts": sum(len(batch) for batch in outcome.samples.values()),  # completions sampled this step
        "trained_tokens": sum(u.tokens for u in updates.values()),
        "nonfinite": [i for i, u in updates.items() if not u.finite],
        "ratings": {
            m.id: {"role": m.role, "mu": ratings.mu(m.id), "sigma": ratings.sigma(m.id), "elo": ratings.elo(m.id)}
            for m in members
        },
        "births": [b.to_dict() for b in births],
        "tokens": outcome.rollout.tokens,
        "tokens_per_second": outcome.rollout.tokens_per_second,
        "seconds": seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        **arms_race(games, outcome, updates, roles, coverage, complexity_kind),
    }


def arms_race(games, outcome, updates: dict, roles: dict[str, str], coverage: int, complexity_kind: str) -> dict:
    """Proposal complexity, coverage, matchups, response lengths and entropy (PopuLoRA §4)."""
    entropy = {i: u.entropy for i, u in updates.items() if u.samples}
    return {
        "complexity": metrics.proposal_complexity(games, complexity_kind),
        "coverage": coverage,
        "matchup": metrics.matchup_matrix(games),
        "response_length": {
            role: metrics.response_length_stats(
                len(s.completion_ids)
                for i in roles
                for s in outcome.samples[i]
                if s.group.startswith("teacher:") == (role == "teacher")
            )
            for role in ("teacher", "student")
        },
        "entropy": entropy,
        "mean_entropy": metrics.finite_mean(entropy.values()),
    }
