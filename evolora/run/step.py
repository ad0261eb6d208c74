"""One step of a run: play the arm's games, train every member, rate, evolve.

    step = StepContext.begin(run)                     # streams from (seed, step)
    repair non-finite members (rollback, or league.cull); who plays
    for game in the arm's pipeline:                   # teacher -> student; student -> critic; ...
        step.add(game, play(run, step, game))         #   samples, games, rated pairs (evolora.plays)
    updates = policy_update_many(every member's samples)   # one GRPO / REINFORCE++ update per adapter
    repair non-finite members again
    outcomes = each play's tally and ratings          # OpenSkill + Elo, with the game's sides
    births, extra = evolution_event(...)              # every k steps (arm.evolve)
    record = step.record(...)                         # the metrics.jsonl line

Each play, ``train`` and ``evolve`` starts with the run's phase hooks (:meth:`evolora.run.Run.phase`).
The timing of each phase, the faults and the record are the :class:`evolora.run.context.StepContext`'s.
Source: PopuLoRA (arXiv 2605.16727) §2 steps 1-7.
"""

from __future__ import annotations

import torch

from evolora.evaluation import held_out_curve
from evolora.event import evolution_event
from evolora.plays import play_spec
from evolora.run.context import StepContext
from evolora.schedule import scheduled_lr
from evolora.selfplay.reward_control import permute_rewards, randomize_rewards, reward_generator


def run_step(run) -> tuple[dict, list]:
    """Play, train, rate and (every k steps) evolve ``run`` once; return the metrics record and the
    step's games (the ``matches.jsonl`` lines). ``run.step`` is the new step's number after it."""
    step = StepContext.begin(run)
    step.faults += repair_faults(run, "before_step", step.streams.repair)
    step.roles = {m.id: m.role for m in run.population.members}  # who plays the step
    for game in run.arm.pipeline:
        if all(run.population.role(role) for role in game.roles):  # e.g. no critics: no review
            step.phase(game.play)  # the run's phase hooks, e.g. model.num_threads: auto's glance
            step.add(game, play_spec(game.play).load()(run, step, game))
    with step.timed("train"):
        step.updates = update(run, step)
    step.faults += update_faults(step.updates) + repair_faults(run, "after_update", step.streams.repair)
    outcomes = step.rate(run.league)
    with step.timed("evolve"):
        step.births, extra = evolution_event(run, step.number, step.streams)  # fitness and breeder's record
    step.stop()
    run.step = step.number
    sections = step.sections(outcomes)  # each play's part of the record
    curve = held_out_curve(run) if run.config.eval.every and step.number % run.config.eval.every == 0 else None
    run.bank.snapshot()  # the last finite factors, for a rollback
    return step.record(sections, extra, curve, run.bank.timing()), step.games


def update(run, step: StepContext) -> dict:
    """One policy update per member on its samples of every play (``learner`` settings; a reward
    control of the ``random_reward`` arm shuffles or replaces the rewards first); {member id: result}."""
    learner = run.config.learner
    samples = step.samples
    if learner.rewards != "real":  # a reward control: the learner sees no signal
        control = permute_rewards if learner.rewards == "permuted" else randomize_rewards
        samples = control(samples, step.roles, reward_generator(run.config.run.seed, step.number))
    members = run.population.members
    jobs = {m.slot: (run.optimizers[m.id], samples.get(m.id, [])) for m in members}
    lr = scheduled_lr(learner.lr, step.number, run.config.run.steps, learner.lr_schedule, learner.lr_final)
    by_slot = run.bank.update(
        jobs,
        lr=lr,
        algorithm=learner.algorithm,
        clip_eps=learner.clip_eps,
        kl_coef=learner.kl_coef,
        epochs=learner.epochs,
        micro_batch=learner.micro_batch,
        max_grad_norm=learner.max_grad_norm,
    )
    return {m.id: by_slot[m.slot] for m in members}


def update_faults(updates: dict) -> list[dict]:
    """The step record's faults of an update: members whose update was skipped (not finite), then
    members whose non-finite rewards were dropped (with how many samples)."""
    skipped = [{"id": i, "where": "update", "action": "skipped"} for i, u in updates.items() if not u.finite]
    return skipped + [
        {"id": i, "where": "reward", "action": "dropped", "samples": u.nonfinite_rewards}
        for i, u in updates.items()
        if u.nonfinite_rewards
    ]


def repair_faults(run, where: str, generator: torch.Generator) -> list[dict]:
    """Find members whose factors hold NaN/Inf and roll them back or cull them; the fault records.

    ``learner.on_nonfinite = "rollback"`` restores the last finite factors (from the end of the
    previous step) with a fresh optimizer; ``"cull"`` replaces the member by a mutated copy of the
    best finite member of its role, with a fresh rating (``generator``: the mutation's draws).
    """
    events = []
    bad = set(run.bank.nonfinite([m.slot for m in run.population.members]))
    for member in [m for m in run.population.members if m.slot in bad]:
        if run.config.learner.on_nonfinite == "rollback":
            run.bank.set_factors(member.slot, run.bank.last_finite(member.slot))
            run.league.reset_optimizer(member)
            events.append({"id": member.id, "where": where, "action": "rollback"})
        else:
            cull = run.league.cull(
                member, run.bank, run.operators.for_role(member.role).mutation, step=run.step + 1, generator=generator
            )
            events.append({"id": member.id, "where": where, "action": "cull", **cull})
    return events
