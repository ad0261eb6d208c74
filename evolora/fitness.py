"""Fitness of the members at an evolution event: the rating, dev-set accuracy, a blend, or a common
exam (:mod:`evolora.exam`).

    signals = {"rating": {id: μ − 3σ}, "validation": {id: dev accuracy of solvers}}
    fitness = member_fitness(config, signals, roles)     # {id: the number selection ranks by}

``rating`` is the paper's conservative rating. ``validation`` is greedy accuracy on the task's dev
set (:meth:`evolora.tasks.base.Task.dev_set`: the training distribution, never the held-out items),
measured for the solving role in one batched engine call (:func:`dev_accuracy`); the other roles
(teachers, critics) keep μ − 3σ, since no dev set scores a proposal. ``blend`` mixes the two as
z-scores within each role. :func:`rank_correlation` measures how well a signal predicts held-out
accuracy across members (the validity of a fitness), and :func:`split_half_agreement` how well the
held-out items can tell the members apart at all (an attenuated reading of the items' reliability:
the ceiling of a validity is the square root of the two reliabilities, docs/results/population-size.md).

Source: PopuLoRA (arXiv 2605.16727) §3 (fitness μ − 3σ); the validation fitness is evolora's own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np
from scipy.stats import spearmanr

from evolora.bank import Bank
from evolora.config.fitness import FitnessConfig
from evolora.evaluation import evaluate
from evolora.exam import exam_record
from evolora.tasks.base import HeldOutItem, Task

if TYPE_CHECKING:
    from evolora.hf_types import Tokenizer


def dev_accuracy(
    bank: Bank,
    tokenizer: Tokenizer,
    task: Task,
    members: Mapping[str, str],
    items: list[HeldOutItem],
    *,
    max_new_tokens: int,
    batch_size: int | None = None,
) -> dict[str, float]:
    """Greedy accuracy of each member on the dev ``items``, in one batched call for all of them.

    Args:
        bank: the adapter bank holding the members' adapters (it generates the answers).
        tokenizer: the model's tokenizer (chat template and decoding).
        task: grades the answers (:meth:`Task.grade_held_out`) and gives their prompts and stop strings.
        members: {bank slot: member id}.
        items: the dev problems, from :meth:`Task.dev_set`.
        max_new_tokens: the cap of each answer, in tokens.
        batch_size: rows per decode batch; None: the default of the bank's engine (by device).

    Returns:
        {member id: accuracy in [0, 1]}; {} when ``members`` or ``items`` is empty.
    """
    if not members or not items:
        return {}
    results = evaluate(
        bank, tokenizer, task, items, list(members), max_new_tokens=max_new_tokens, batch_size=batch_size
    )
    return {members[slot]: result.accuracy for slot, result in results.items()}


def _zscores(values: Mapping[str, float]) -> dict[str, float]:
    """(v − mean) / std over ``values`` (population std); all 0 when the std is 0."""
    array = np.array(list(values.values()), dtype=float)
    std = float(array.std())
    return {k: (float(v) - float(array.mean())) / std if std > 0 else 0.0 for k, v in values.items()}


def member_fitness(
    config: FitnessConfig, signals: Mapping[str, Mapping[str, float]], roles: Mapping[str, str]
) -> dict[str, float]:
    """The fitness of every member, higher is better.

    Args:
        config: ``evolution.fitness``.
        signals: ``"rating"``: {id: μ − 3σ} for every member; ``"validation"``: {id: dev accuracy}
            for the members that have one (the solving role), needed unless ``config.name`` is ``rating``.
        roles: {id: role} of every member.

    Returns:
        {id: fitness}. ``rating``: μ − 3σ. ``validation``: dev accuracy in [0, 1] where measured,
        else μ − 3σ. ``blend``: ``weight``·z(validation) + (1 − ``weight``)·z(rating), ``weight`` in
        [0, 1], both z-scored within the role (a role where a member lacks dev accuracy: z(rating)).

    Raises:
        ValueError: a validation-based fitness without ``signals["validation"]``.
        KeyError: ``blend``, and a member of ``signals["rating"]`` is missing from ``roles``.
    """
    rating = dict(signals["rating"])
    if config.name == "rating":
        return rating
    validation = signals.get("validation")
    if validation is None:
        raise ValueError(f"evolution.fitness {config.name!r} needs dev-set accuracy; none was measured")
    if config.name == "validation":
        return {member: float(validation.get(member, value)) for member, value in rating.items()}
    fitness: dict[str, float] = {}
    for role in dict.fromkeys(roles.values()):
        members = [m for m in rating if roles[m] == role]
        z_rating = _zscores({m: rating[m] for m in members})
        if all(m in validation for m in members):
            z_valid = _zscores({m: validation[m] for m in members})
            fitness.update({m: config.weight * z_valid[m] + (1 - config.weight) * z_rating[m] for m in members})
        else:
            fitness.update(z_rating)
    return fitness


def fitness_dev_set(task: Task, config) -> list[HeldOutItem] | None:
    """The dev problems of a run (``evolution.fitness.size`` of :meth:`Task.dev_set`), or None
    when the task has none.

    Args:
        task: the run's task.
        config: the run's :class:`evolora.config.Config` (reads ``evolution`` and ``arm.evolve``).

    Returns:
        Up to ``evolution.fitness.size`` dev problems, the same on every call; None when the task
        has no dev set (allowed when the fitness is ``rating`` or the run does not evolve).

    Raises:
        ValueError: ``evolution.fitness`` is ``validation`` or ``blend``, the run evolves, and the task
            has no dev set.
    """
    fitness = config.evolution.fitness
    items = task.dev_set(fitness.size)
    required = fitness.name in ("validation", "blend")  # an exam without a dev set is self-play problems only
    if required and config.arm.evolve and config.evolution.enabled and not items:
        raise ValueError(
            f"evolution.fitness {fitness.name!r}: task {task.name!r} has no dev set "
            "(gsm: give task.params.train_path, a GSM8K train jsonl); use evolution.fitness: rating"
        )
    return items or None


def fitness_record(config: FitnessConfig, members, ratings, validation: Mapping[str, float] | None) -> dict:
    """Every member's fitness with the signals it comes from (a step record's ``fitness``).

    Args:
        config: ``evolution.fitness``.
        members: the population's :class:`evolora.population.Individual` list.
        ratings: their :class:`evolora.ratings.Ratings`.
        validation: {id: dev accuracy in [0, 1]} of the solvers, or None when not measured (a
            validation fitness then falls back to μ − 3σ).

    Returns:
        {"name": config.name, "members": {id: {"role", "rating" (μ − 3σ), "validation" (in [0, 1]
        or None), "fitness"}}}.
    """
    rating = {m.id: ratings.conservative(m.id) for m in members}
    roles = {m.id: m.role for m in members}
    fitness = (
        member_fitness(config, {"rating": rating, "validation": validation}, roles)
        if validation is not None or not config.needs_dev_set
        else rating
    )
    return {
        "name": config.name,
        "members": {
            m.id: {
                "role": m.role,
                "rating": rating[m.id],
                "validation": None if validation is None else validation.get(m.id),
                "fitness": fitness[m.id],
            }
            for m in members
        },
    }


def fitness_now(run, *, measure: bool) -> dict:
    """Every member of ``run`` with its fitness now and the signals it comes from.

    Args:
        run: an :class:`evolora.run.Run` (its population, ratings, bank, task, dev items and config).
        measure: also measure the dev-set accuracy of the solvers, in one batched greedy call
            (:func:`dev_accuracy`, at ``eval.max_new_tokens`` and ``eval.batch_size``); no effect
            when the run has no dev items.

    Returns:
        A :func:`fitness_record`: ``{"name", "members": {id: {"role", "rating", "validation",
        "fitness"}}}``; ``validation`` is None for every member when not measured. With
        ``evolution.fitness: exam``, :func:`evolora.exam.exam_record` (the exam is always sat).
    """
    if run.config.evolution.fitness.name == "exam":
        return exam_record(run)
    validation = None
    if measure and run.dev_items:
        solvers = {m.slot: m.id for m in run.population.players(run.arm.game)[1]}
        validation = dev_accuracy(
            run.bank,
            run.tokenizer,
            run.task,
            solvers,
            run.dev_items,
            max_new_tokens=run.config.eval.max_new_tokens,
            batch_size=run.config.eval.batch_size,
        )
    return fitness_record(run.config.evolution.fitness, run.population.members, run.ratings, validation)


def final_fitness(record: dict, held_out: Mapping[str, dict], dev_size: int) -> dict:
    """The summary's ``fitness``: the final members' fitness record with how well each signal
    predicts held-out accuracy.

    Args:
        record: a :func:`fitness_record` of the final members.
        held_out: ``{id or "base": {"accuracy": value in [0, 1], ...}}``, the held-out results;
            ``"base"`` is ignored.
        dev_size: the number of dev problems the validation signal was measured on (0: none).

    Returns:
        ``record`` with ``"dev_size"`` and ``"rank_correlation"``: {"rating", "validation",
        "fitness"}, each Spearman's ρ in [−1, 1] of the signal with held-out accuracy over the
        members that have both (:func:`rank_correlation`), None with fewer than 3 of them or a
        constant side (:func:`pooled_rank_correlation` pools runs).

    Raises:
        KeyError: an entry of ``held_out`` without ``"accuracy"``, or a member entry of ``record``
            without one of the three signals.
    """
    accuracy = {m: r["accuracy"] for m, r in held_out.items() if m != "base"}
    members = record["members"]
    return {
        **record,
        "dev_size": dev_size,
        "rank_correlation": {
            signal: rank_correlation(
                {m: e[signal] for m, e in members.items() if m in accuracy and e[signal] is not None}, accuracy
            )
            for signal in ("rating", "validation", "fitness")
        },
    }


def rank_correlation(signal: Mapping[str, float], held_out: Mapping[str, float]) -> float | None:
    """Spearman's ρ between a fitness signal and held-out accuracy over the members both have.

    Returns:
        ρ in [−1, 1], or None with fewer than 3 members or when either side is constant (undefined).
    """
    keys = [k for k in signal if k in held_out]
    x, y = [signal[k] for k in keys], [held_out[k] for k in keys]
    if len(keys) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    rho = float(spearmanr(x, y).statistic)
    return rho if math.isfinite(rho) else None


def pooled_rank_correlation(runs: list[tuple[Mapping[str, float], Mapping[str, float]]]) -> dict:
    """How well a signal predicts held-out accuracy *within* runs, pooled over runs (seeds).

    Each run's signal and accuracy are centred on the run's mean (so seed-to-seed differences in
    level do not count), then Spearman's ρ is taken over every (run, member) pair. Also counted:
    the within-run pairs of members whose signal order agrees / disagrees with their held-out order.

    Args:
        runs: per run, ({member: signal}, {member: held-out accuracy}); a member whose signal is
            None or that has no accuracy is left out, and a run with fewer than 2 members left is skipped.

    Returns:
        {"rho": ρ in [−1, 1], or None with fewer than 3 points or when either side is constant;
        "members": the number of (run, member) points pooled; "concordant", "discordant", "tied":
        counts of within-run member pairs}.
    """
    xs, ys = [], []
    concordant = discordant = tied = 0
    for signal, held in runs:
        keys = [k for k in signal if k in held and signal[k] is not None]
        if len(keys) < 2:
            continue
        sx = np.array([signal[k] for k in keys], dtype=float)
        sy = np.array([held[k] for k in keys], dtype=float)
        xs += list(sx - sx.mean())
        ys += list(sy - sy.mean())
        for i in range(len(keys)):
            for j in range(i + 1, len(keys)):
                product = (sx[i] - sx[j]) * (sy[i] - sy[j])
                concordant += product > 0
                discordant += product < 0
                tied += product == 0
    rho = None
    if len(xs) >= 3 and len(set(xs)) > 1 and len(set(ys)) > 1:
        rho = float(spearmanr(xs, ys).statistic)
    return {
        "rho": rho,
        "members": len(xs),
        "concordant": int(concordant),
        "discordant": int(discordant),
        "tied": int(tied),
    }


def split_half_agreement(
    runs: list[Mapping[str, np.ndarray]], *, size: int, generator: np.random.Generator, splits: int = 200
) -> dict:
    """How well two halves of the held-out items agree on the order of a run's members: their
    split-half reliability, which the Spearman–Brown formula steps up to all N items; the validity a
    fitness can show against them (:func:`pooled_rank_correlation`) is at most its square root.

    Each split draws ``size`` of the N items at random (one draw shared by every run) and takes the
    pooled within-run Spearman ρ between the members' accuracy on those items and on the other
    N − size. Members that answer nearly alike give ρ near 0 whatever their true order.

    Args:
        runs: per run, {member: per-item correctness, (N,) floats in [0, 1]}; the same N items, in
            the same order, in every run. Runs with fewer than 2 members add nothing.
        size: items on the first side of a split, in [1, N − 1].
        generator: draws the splits (explicit, so the result replays).
        splits: random splits (>= 1).

    Returns:
        {"mean": mean ρ over the splits where ρ is defined, "low"/"high": its 10th and 90th
        percentiles, "splits": how many splits gave a defined ρ, "size", "items": N}; the three
        ρ values are None when no split gave one.

    Raises:
        ValueError: runs with different N, ``size`` outside [1, N − 1], or ``splits`` < 1.

    Source: split-half reliability, applied within runs; evolora's own use.
    """
    lengths = {len(np.asarray(items)) for run in runs for items in run.values()}
    if len(lengths) != 1:
        raise ValueError(f"every member of every run needs the same held-out items, got lengths {sorted(lengths)}")
    (n,) = lengths
    if not 1 <= size <= n - 1:
        raise ValueError(f"size must be in [1, {n - 1}], got {size}")
    if splits < 1:
        raise ValueError(f"splits must be >= 1, got {splits}")
    matrices = [{m: np.asarray(items, dtype=float) for m, items in run.items()} for run in runs]
    values = []
    for _ in range(splits):
        order = generator.permutation(n)
        first, rest = order[:size], order[size:]
        pooled = pooled_rank_correlation(
            [
                (
                    {m: float(x[first].mean()) for m, x in run.items()},
                    {m: float(x[rest].mean()) for m, x in run.items()},
                )
                for run in matrices
            ]
        )
        if pooled["rho"] is not None:
            values.append(pooled["rho"])
    if not values:
        return {"mean": None, "low": None, "high": None, "splits": 0, "size": size, "items": n}
    low, high = np.percentile(values, [10, 90])
    return {
        "mean": float(np.mean(values)),
        "low": float(low),
        "high": float(high),
        "splits": len(values),
        "size": size,
        "items": n,
    }
