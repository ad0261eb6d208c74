"""The plays that ship (:mod:`evolora.plays`): the proposer/solver game and the critics' review.

    play_game(run, step, game)      # evolora.selfplay.play_step: PFSP pairs, proposals, verdicts, answers
    play_review(run, step, game)    # evolora.critic.review_step: verdicts on the answers of the game before
    evaluate_review(run, game)      # the end of run's held-out critic evaluation (summary["critic_eval"])

Each wraps its game's module and returns a :class:`evolora.plays.Played`: its samples, games,
rated pairs, tally and its section of the step record. Source: PopuLoRA (arXiv 2605.16727) §2;
SPC (arXiv 2504.19162).
"""

from __future__ import annotations

from dataclasses import replace

from evolora import metrics
from evolora.critic import review_rates, review_step, review_summary
from evolora.critic.evaluation import critic_evaluation
from evolora.game import Game
from evolora.generation.types import RolloutStats
from evolora.plays import Played
from evolora.run.context import StepContext
from evolora.selfplay import StepOutcome, play_step
from evolora.step_record import step_record


def play_game(run, step: StepContext, game: Game) -> Played:
    """The proposer/solver game of the step (:func:`evolora.selfplay.play_step`), with the hall of fame's
    frozen solvers, the run's problem memory and, under ``evolution.fitness: exam``, the exam window.

    Its section is the step record's body (:func:`evolora.step_record.step_record`): its games'
    rates and rewards with the step's losses, ratings, births and timing."""
    proposers, solvers = run.population.players(game)
    outcome = play_step(
        run.bank,
        run.tokenizer,
        run.task,
        proposers,
        solvers,
        run.ratings,
        run.config.selfplay,
        rng=step.streams.proposals,
        np_rng=step.streams.matchmaking,
        frozen=run.league.frozen(game.solver),
        memory=run.memory,
        step=step.number,
    )
    if run.config.evolution.fitness.name == "exam":
        run.exam_window.add(step.number, outcome.games)  # the next exam's problems

    def section(done: StepContext, outcomes: dict[str, str]) -> dict:
        run.signatures.update(metrics.signature(g.problem) for g in outcome.games if g.valid and g.problem)
        return step_record(
            done.number,
            replace(outcome, samples=done.samples, rollout=done.rollout),  # rollouts and tokens of the whole step
            done.updates,
            outcomes,
            done.births,
            done.seconds,
            {i: role for i, role in done.roles.items() if role in game.roles},
            members=run.population.members,
            ratings=run.ratings,
            coverage=metrics.coverage(run.signatures),
            complexity_kind=run.task.complexity_kind,
        )

    return Played(
        samples=outcome.samples,
        games=outcome.games,
        rates=outcome.pair_solve_rates,
        tally=game_tally(outcome.games),
        seconds=outcome.seconds,
        rollout=outcome.rollout,
        section=section,
    )


def game_tally(games) -> dict[str, dict[str, int]]:
    """Each player's counts of a step's games (:class:`evolora.selfplay.GameRecord`): proposals and
    valid ones of the proposer, attempts and correct ones of the solver (one agent holds both)."""
    tally: dict[str, dict[str, int]] = {}
    for game in games:
        proposer = tally.setdefault(game.teacher, {})
        proposer["proposals"] = proposer.get("proposals", 0) + 1
        proposer["valid"] = proposer.get("valid", 0) + game.valid
        solver = tally.setdefault(game.student, {})
        solver["attempts"] = solver.get("attempts", 0) + len(game.grades)
        solver["correct"] = solver.get("correct", 0) + sum(label == "correct" for label in game.grades)
    return tally


def play_review(run, step: StepContext, game: Game) -> Played:
    """The critics' review of the step (:func:`evolora.critic.review_step`): each critic judges answers
    of the play before it whose solvers are this game's proposers. The verdicts go into those games'
    ``reviews`` and their survival bonuses into the students' samples; the critics' samples,
    rated pairs (balanced agreement) and the record's section, named by the judging role (``critic``),
    are its own."""
    source = next(played for earlier, played in step.played if earlier.solver == game.proposer)
    samples = dict(step.samples)  # review_step adds the critics' samples; the students' are updated in place
    outcome = StepOutcome(samples, source.games, [], {}, {}, RolloutStats())
    students, critics = run.population.players(game)
    reviews = review_step(
        run.bank,
        run.tokenizer,
        run.task,
        outcome,
        students,
        critics,
        run.ratings,
        run.config.selfplay,
        np_rng=step.streams.matchmaking,
    )
    rates = review_rates(reviews)

    def section(done: StepContext, outcomes: dict[str, str]) -> dict:
        lengths = metrics.response_length_stats(
            len(s.completion_ids) for i, role in done.roles.items() if role == game.solver for s in samples[i]
        )
        return {
            game.solver: {
                **review_summary(reviews),
                "pair_agreement": {f"{s}|{c}": r for (s, c), r in rates.items()},
                "match_outcomes": outcomes,
                "response_length": lengths,
            }
        }

    return Played(
        samples={c.id: samples[c.id] for c in critics},
        rates=rates,
        tally=review_tally(reviews),
        seconds=outcome.seconds,
        rollout=outcome.rollout,
        section=section,
    )


def review_tally(reviews) -> dict[str, dict[str, int]]:
    """Each critic's counts of a step's reviews (:class:`evolora.critic.Review`): reviews, agreed
    (verdict = the verifier's) and format (no verdict parsed)."""
    tally: dict[str, dict[str, int]] = {}
    for review in reviews:
        critic = tally.setdefault(review.critic, {})
        critic["reviews"] = critic.get("reviews", 0) + 1
        critic["agreed"] = critic.get("agreed", 0) + (review.verdict == review.truth)
        critic["format"] = critic.get("format", 0) + (review.verdict is None)
    return tally


def evaluate_review(run, game: Game) -> dict:
    """``{"critic_eval": ...}``: the held-out critic evaluation
    (:func:`evolora.critic.evaluation.critic_evaluation`) of a run with critics: the base and every
    answerer of ``game.proposer`` (students) answer, the base and every critic (best rating first)
    judge. {} without critics or when evaluation is off."""
    critics, evaluation = run.population.role(game.solver), run.config.eval
    if not critics or not evaluation.enabled:
        return {}
    ranked = sorted(critics, key=lambda m: -run.ratings.conservative(m.id))
    selfplay = run.config.selfplay
    result = critic_evaluation(
        run.bank,
        run.tokenizer,
        run.task,
        {m.slot: m.id for m in run.population.role(game.proposer)},
        {m.slot: m.id for m in ranked},
        limit=evaluation.critic_limit,
        n=evaluation.critic_samples,
        sampling=selfplay.sampling(game.proposer),
        max_new_tokens=evaluation.max_new_tokens,
        critic_max_new_tokens=selfplay.sampling(game.solver).max_new_tokens,
        batch_size=evaluation.batch_size,
        seed=run.config.run.seed,
    )
    return {"critic_eval": result} if result else {}
