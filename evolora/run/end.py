"""The end of a run: held-out evaluation, every member's adapter in ``final/``, ``final/summary.json``.

    fitness = fitness_now(run)                 # the fittest member is chosen without the held-out items
    held_out, family = evaluate(run, fitness)  # greedy accuracy of the solvers and the base
    final/<id>/                                # each member as a PEFT adapter
    summary = {individuals, held_out, lineage, diversity, ... each play's evaluation (critic_eval)}

Source: PopuLoRA (arXiv 2605.16727) §4 (held-out accuracy of the students against the base).
"""

from __future__ import annotations

from functools import partial

from evolora.evaluation import held_out_accuracy
from evolora.evaluation.family import family_accuracy
from evolora.evaluation.members import fittest
from evolora.fitness import final_fitness, fitness_now
from evolora.io import write_json_atomic
from evolora.operators import population_diversity
from evolora.plays import play_spec


def evaluate(run, fitness: dict | None = None) -> tuple[dict[str, dict], dict]:
    """Greedy held-out accuracy of the solvers (and the base model when configured), by
    :func:`evolora.evaluation.held_out_accuracy`; every answer goes to ``final/held_out.jsonl``.
    ``eval.members``: every solver, or the fittest by ``fitness`` (a
    :func:`evolora.fitness.fitness_record` of now; measured when not given). Returns (the results,
    the same members' :func:`evolora.evaluation.family.family_accuracy` record: {} without one). Each
    decode batch starts the run's ``held_out`` phase (:meth:`evolora.run.Run.phase`)."""
    config = run.config
    solvers = run.population.players(run.arm.game)[1]
    if config.eval.members == "fittest" and config.eval.enabled and len(solvers) > 1:
        record = fitness or fitness_now(run, measure=config.evolution.fitness.needs_dev_set)
        best = fittest(record, [m.id for m in solvers])
        solvers = [m for m in solvers if m.id == best]
    members = {m.slot: m.id for m in solvers}
    batch = partial(run.phase, "held_out")  # each decode batch starts a phase (evolora.run.Run.phase)
    results, _ = held_out_accuracy(
        run.bank,
        run.tokenizer,
        run.task,
        members,
        config.eval,
        seed=config.run.seed,
        answers_path=run.out_dir / "final" / "held_out.jsonl",
        before_batch=batch,
    )
    family = family_accuracy(
        run.bank,
        run.tokenizer,
        run.task,
        members,
        config.eval,
        exclude=set(run.memory.answers),
        answers_path=run.out_dir / "final" / "held_out_family.jsonl",
        before_batch=batch,
    )
    return results, family


def evaluate_plays(run) -> dict:
    """The summary keys of every play's end-of-run evaluation (:attr:`evolora.plays.PlaySpec.evaluate`),
    in pipeline order: ``critic_eval`` in a run with critics; {} when no play has one."""
    found: dict = {}
    for game in run.arm.pipeline:
        evaluation = play_spec(game.play).load_evaluate()
        if evaluation is not None:
            found.update(evaluation(run, game))
    return found


def diversity(run) -> dict[str, float]:
    """Per role with >= 2 members: mean pairwise ‖ΔW_i − ΔW_j‖_F / mean ‖ΔW_i‖_F
    (:func:`evolora.operators.population_diversity`; 0 = identical members)."""
    roles: dict[str, list] = {}
    for member in run.population.members:
        roles.setdefault(member.role, []).append(run.bank.get_factors(member.slot))
    return {role: population_diversity(adapters) for role, adapters in roles.items() if len(adapters) > 1}


def individuals(run, held_out: dict) -> list[dict]:
    """The summary's row of every member, best rating first: its rating, role, parents, games tally,
    solve (or valid, or agreement) rate, operator, birth step and held-out result."""
    rows = []
    for row in run.ratings.table([m.id for m in run.population.members]):
        member = run.population.by_id(row["id"])
        tally = run.tally.get(member.id, {})
        rows.append(
            {
                **row,
                "role": member.role,
                "parents": list(member.parents),
                "games": tally,
                "solve_or_valid_rate": _rate(tally),
                "operator": member.operator,
                "born_step": member.born_step,
                "held_out": held_out.get(member.id),
            }
        )
    return rows


def _rate(tally: dict) -> float | None:
    """A member's success rate from its tally: correct per attempt (a solver), else valid per
    proposal (a proposer), else agreed per review (a critic); None without games."""
    for successes, trials in (("correct", "attempts"), ("valid", "proposals"), ("agreed", "reviews")):
        if tally.get(trials):
            return tally.get(successes, 0) / tally[trials]
    return None


def finish(run, *, evaluate_held_out: bool = True) -> dict:
    """Evaluate, write every member to ``final/<id>/`` as a PEFT adapter and ``final/summary.json``;
    return the summary."""
    config = run.config
    record = None
    if evaluate_held_out and config.eval.enabled:
        run.phase("fitness")  # the run's phase hooks (evolora.run.Run.phase)
        record = fitness_now(run, measure=True)
    held_out, family = evaluate(run, record) if evaluate_held_out else ({}, {})
    final = run.out_dir / "final"
    for member in run.population.members:
        run.bank.save_adapter(member.slot, final / member.id)
    summary = {
        "steps": run.step,
        "model": config.model.name,
        "task": config.task.name,
        "mode": config.selfplay.mode,
        "seed": config.run.seed,
        "hall_of_fame": run.hall.ids if run.hall else [],
        "held_out_source": run.task.held_out_source if evaluate_held_out else None,
        "individuals": individuals(run, held_out),
        "held_out": held_out,
        "held_out_members": config.eval.members if held_out else None,
        "lineage": run.lineage,
        "diversity": diversity(run),
    }
    if record is not None:
        summary["fitness"] = final_fitness(record, held_out, len(run.dev_items or []))
    if family:  # only a run with eval.family on a task that has a family set has the key
        summary["held_out_family"] = family
    if evaluate_held_out:
        summary.update(evaluate_plays(run))  # only a run with critics has critic_eval
    write_json_atomic(final / "summary.json", summary)
    return summary
