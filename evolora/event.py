"""One evolution event of a run: measure, select and vary, and record whether selection acted.

    fitness  = fitness_now(run)                       # rating, dev accuracy, or the common exam
    audit    = held-out accuracy of the solvers        # evolution.audit > 0: never used to select
    response = response_record(last event, fitness)   # the previous children against their role now
    births   = league.evolve(fitness, cases)          # bottom γ of each role -> children (cases: the exam's)
    record   = {"fitness", "evolution": {"selection", "response"}}   # the breeder's equation, per role

Source: PopuLoRA (arXiv 2605.16727) §2 step 7; the record is :mod:`evolora.breeding`'s.
"""

from __future__ import annotations

import torch

from evolora.breeding import response_record, selection_record
from evolora.evaluation import evaluate
from evolora.fitness import fitness_now


def is_event(run, step: int) -> bool:
    """True when ``step`` of ``run`` is an evolution step (``evolution.every``, the arm, ``at_last_step``)."""
    evo = run.config.evolution
    return bool(
        run.arm.evolve and evo.enabled and step % evo.every == 0 and (evo.at_last_step or step < run.config.run.steps)
    )


def audit(run, members: dict) -> None:
    """Add each solver's greedy held-out accuracy on the first ``evolution.audit`` items to
    ``members`` (a fitness record's ``members``) as ``held_out``, in one batched call."""
    limit = run.config.evolution.audit
    items = run.task.held_out(limit, None) if limit else None
    if not items:
        return
    solvers = {m.slot: m.id for m in run.population.players(run.arm.game)[1]}
    results = evaluate(
        run.bank,
        run.tokenizer,
        run.task,
        items,
        list(solvers),
        max_new_tokens=run.config.eval.max_new_tokens,
        batch_size=run.config.eval.batch_size,
    )
    for slot, member in solvers.items():
        members[member]["held_out"] = results[slot].accuracy


def exam_cases(record: dict, score: str) -> dict[str, torch.Tensor]:
    """{solver: (N,) float64 per-problem scores} of a fitness record's exam, by ``score``: the 0/1
    outcomes for ``accuracy``, the worked answers' log-probabilities (nats per token) for ``logprob``
    (when measured); {} for a fitness without an exam. What lexicase selects on (:mod:`evolora.operators.lexicase`)."""
    exam = record.get("exam")
    if not exam:
        return {}
    if score == "logprob" and "logprob" in exam:
        return {m: torch.tensor(row, dtype=torch.float64, device="cpu") for m, row in exam["logprob"].items()}
    return {
        m: torch.tensor([float(c) for c in row], dtype=torch.float64, device="cpu")
        for m, row in exam["outcomes"].items()
    }


def evolution_event(run, step: int, streams) -> tuple[list, dict]:
    """The outer loop at ``step`` when it is an event: (births, {"fitness", "evolution"}); else ([], {}).

    Parents come from the selection stream; coins, crossovers and mutations from the variation stream
    (:mod:`evolora.streams`). ``run.last_event`` and ``run.exam_window`` move on to the next event.
    """
    if not is_event(run, step):
        return [], {}
    evo = run.config.evolution
    fitness = fitness_now(run, measure=evo.fitness.needs_dev_set)
    audit(run, fitness["members"])
    response = response_record(run.last_event, step, fitness["members"]) if run.last_event else None
    births = run.league.evolve(
        run.bank,
        evo,
        step=step,
        generator=streams.variation,
        selection_generator=streams.selection,
        operators=run.operators,
        fitness={m: entry["fitness"] for m, entry in fitness["members"].items()},
        cases=exam_cases(fitness, evo.fitness.score),
    )
    run.league.enshrine(run.bank, run.arm.game.solver, step)
    selection = selection_record(fitness["members"], births)
    run.last_event = {"step": step, "selection": selection}
    run.exam_window.clear()
    return births, {"fitness": fitness, "evolution": {"selection": selection, "response": response}}
