"""A PopuLoRA run: league + task + self-play + learner + evolution, step by step.

    run = Run(config, "runs/demo")              # loads the base once, builds the league
    run.train(callbacks=[...])                  # steps; callbacks log, checkpoint, show progress
    summary = run.finish()                      # held-out eval, final/ adapters, summary.json

One step (:meth:`Run.run_step`), PopuLoRA (arXiv 2605.16727) §2:

    repair non-finite members (rollback, or league.cull)
    proposers, solvers = population.players(arm.game)   # teachers, students; or the agent twice
    outcome = play_step(proposers, solvers, ...)         # PFSP pairs, proposals, verdicts, answers, rewards
    reviews = review_step(students, critics, ...)        # with critics: verdicts on the answers, rewards
    policy_update_many(every member's samples)           # one GRPO / REINFORCE++ update per adapter
    league.count(games); league.rate(pair solve rates)   # tally, OpenSkill + Elo
    every k steps (arm.evolve): evolution_event(...)     # fitness (e.g. a common exam), bottom γ of each
                                                         #   role -> children through league.replace;
                                                         #   the breeder's record (evolora.event)

Each step seeds its own generators from (seed, step), one per purpose (:mod:`evolora.streams`:
rollouts, matchmaking, selection, variation, ...), so a run resumed from a checkpoint replays
exactly what the uninterrupted run would have done, and a change of selection operator changes
only the parents chosen. ``run.backend: ray`` puts the
adapters on Ray workers (:class:`evolora.distributed.sharded_bank.ShardedBank`, the same bank protocol as
:class:`evolora.bank.local.AdapterBank`); a lost worker is restarted, the workers restored from the
newest checkpoint and the steps since replayed (:func:`evolora.distributed.recovery.run_step_with_recovery`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from evolora import metrics
from evolora.bank.local import AdapterBank
from evolora.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from evolora.config import Config, dump_config
from evolora.config.operator_choice import resolve_operators
from evolora.critic import Review, review_rates, review_step, review_summary
from evolora.critic.evaluation import critic_evaluation
from evolora.distributed.recovery import run_step_with_recovery
from evolora.evaluation import held_out_accuracy, held_out_curve
from evolora.evaluation.family import family_accuracy
from evolora.evaluation.members import fittest
from evolora.event import evolution_event
from evolora.exam import ExamWindow
from evolora.fitness import final_fitness, fitness_dev_set, fitness_now
from evolora.generation.registry import resolve_engine
from evolora.io import write_json_atomic, write_text_atomic
from evolora.league import League
from evolora.model.device import model_device, resolve_device
from evolora.operators import population_diversity
from evolora.population import Individual, Population
from evolora.schedule import scheduled_lr
from evolora.selfplay import GameRecord, play_step
from evolora.selfplay.memory import ProblemMemory
from evolora.selfplay.reward_control import permute_rewards, randomize_rewards, reward_generator
from evolora.step_record import step_record
from evolora.streams import step_streams
from evolora.tasks import make_task

if TYPE_CHECKING:
    from evolora.bank import RunBank
    from evolora.hf_types import CausalLM, Tokenizer

Callback = Callable[["Run", dict, list[GameRecord]], None]
"""Called after every step with the run, the step's metrics record and its games."""


class Run:
    """One self-play evolution run writing into ``out_dir``.

    Args:
        config: a validated :class:`evolora.config.Config`.
        out_dir: the run directory (created; holds config.yaml, metrics.jsonl, matches.jsonl,
            checkpoints/, final/).
        model, tokenizer: an already loaded base model (else loaded from ``config.model``; with
            ``run.backend: ray`` each worker builds its own from ``config.model``, so ``model`` must be None).
        task: a task object (else built from ``config.task``).

    Raises:
        ValueError: a ``model`` given with ``run.backend: ray``, or (in process, without ``model``)
            a ``model.device`` GPU that torch does not see, or ``generation.engine: graph`` without
            one, before anything is written.
    """

    bank: RunBank
    """Every adapter of the run: :class:`evolora.bank.local.AdapterBank` in process, or
    :class:`evolora.distributed.sharded_bank.ShardedBank` on Ray (:data:`evolora.bank.RunBank`)."""

    def __init__(
        self,
        config: Config,
        out_dir: str | Path,
        *,
        model: CausalLM | None = None,
        tokenizer: Tokenizer | None = None,
        task=None,
    ):
        if model is None and config.run.backend == "local":
            # a GPU that is not there, or a graph engine without one: refused before anything is written
            resolve_engine(config.generation.engine, resolve_device(config.model.device))
        self.config = config
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.operators = resolve_operators(config.evolution)
        self.task = task if task is not None else make_task(config.task.name, **config.task.params)
        self.arm = config.arm  # the game each step plays and whether the outer loop evolves
        self.dev_items = fitness_dev_set(
            self.task, config
        )  # refuses a validation fitness without one, before the model loads
        population = Population.initial(config.role_sizes)
        capacity = config.selfplay.matchmaking.hall_of_fame
        lora = config.lora
        slots = [m.slot for m in population.members] + [f"H{i}" for i in range(capacity)]
        if config.run.backend == "ray":
            from evolora.distributed.sharded_bank import ShardedBank

            if model is not None:
                raise ValueError("run.backend=ray: each worker builds its own base from config.model; pass model=None")
            self.bank = ShardedBank(config, slots)
            tokenizer = tokenizer if tokenizer is not None else self.bank.tokenizer
        else:
            if model is None:
                from evolora.model import load_base

                model, tokenizer = load_base(
                    config.model.name,
                    dtype=config.model.dtype,
                    prepack=config.model.prepack,
                    num_threads=config.model.num_threads,
                    device=config.model.device,
                )
            self.bank = AdapterBank(
                model,
                slots,
                rank=lora.rank,
                alpha=lora.alpha,
                target_modules=lora.target_modules,
                tokenizer=tokenizer,
                engine=config.generation.engine,
            )
        self.tokenizer = tokenizer
        self.device = model_device(self.bank.model) if config.run.backend == "local" else torch.device("cpu")
        init = torch.Generator(device="cpu").manual_seed(config.run.seed)  # the same founders on every device
        for member in population.members:
            self.bank.init_factors(member.slot, init, b_std=lora.init_b_std)
        self.league = League(
            population, self._new_optimizer, hall_capacity=capacity, child_rating=config.evolution.child_rating
        )
        self.exam_window = ExamWindow()  # proposals since the last event (evolution.fitness: exam)
        self.last_event: dict | None = None  # the last event's selection, for its response at the next
        self.step = 0
        self.log_counts = {"metrics": 0, "matches": 0}
        self.bank.snapshot()
        self.signatures: set[str] = set()  # problem signatures seen so far (coverage)
        self.memory = ProblemMemory(config.selfplay.rewards.repetition_window)  # problems across steps
        write_text_atomic(self.out_dir / "config.yaml", dump_config(config))

    def _new_optimizer(self, slot: str) -> torch.optim.Optimizer:
        return self.bank.new_optimizer(slot, lr=self.config.learner.lr, weight_decay=self.config.learner.weight_decay)

    # read-only views of the league (kept for callers and notebooks)
    population = property(lambda self: self.league.population, doc="The members (:attr:`League.population`).")
    ratings = property(lambda self: self.league.ratings, doc="The members' ratings (:attr:`League.ratings`).")
    optimizers = property(lambda self: self.league.optimizers, doc="{id: optimizer} (:attr:`League.optimizers`).")
    lineage = property(lambda self: self.league.lineage, doc="Every individual born (:attr:`League.lineage`).")
    tally = property(lambda self: self.league.tally, doc="{id: games played} (:attr:`League.tally`).")
    hall = property(lambda self: self.league.hall, doc="The hall of fame or None (:attr:`League.hall`).")
    hall_slots = property(lambda self: self.league.hall_slots, doc="{snapshot id: bank slot}.")

    # -- one step ----------------------------------------------------------------------------
    def run_step(self) -> tuple[dict, list[GameRecord]]:
        """Play, train, rate and (every k steps) evolve once; return the metrics record and games.

        With ``run.backend: ray``, a worker lost during the step is restarted, every worker restored
        from the newest checkpoint, the steps since it replayed and the step repeated
        (:func:`evolora.distributed.recovery.run_step_with_recovery`).

        Raises:
            evolora.distributed.recovery.ClusterLost: the workers cannot be restored; the message names the
                run directory to ``--resume``.
        """
        return run_step_with_recovery(self, self._run_step)

    def _run_step(self) -> tuple[dict, list[GameRecord]]:
        step = self.step + 1
        began = time.perf_counter()
        streams = step_streams(self.config.run.seed, step)  # one generator per purpose (evolora.streams)
        rng, np_rng = streams.proposals, streams.matchmaking
        self.bank.seed(streams.rollout_seed)
        faults = self._repair_faults("before_step", streams.repair)
        proposers, solvers = self.population.players(self.arm.game)
        roles = {m.id: m.role for m in self.population.members}  # who played this step (evolution may replace them)
        outcome = play_step(
            self.bank,
            self.tokenizer,
            self.task,
            proposers,
            solvers,
            self.ratings,
            self.config.selfplay,
            rng=rng,
            np_rng=np_rng,
            frozen=self._frozen(),
            memory=self.memory,
            step=step,
        )
        reviews = self._review(outcome, np_rng)  # None: the run has no critics
        seconds = dict(outcome.seconds)

        t0 = time.perf_counter()
        learner = self.config.learner
        samples = outcome.samples
        if learner.rewards != "real":  # a reward control: the learner sees no signal
            control = permute_rewards if learner.rewards == "permuted" else randomize_rewards
            samples = control(samples, roles, reward_generator(self.config.run.seed, step))
        jobs = {m.slot: (self.optimizers[m.id], samples[m.id]) for m in self.population.members}
        lr = scheduled_lr(learner.lr, step, self.config.run.steps, learner.lr_schedule, learner.lr_final)
        by_slot = self.bank.update(
            jobs,
            lr=lr,
            algorithm=learner.algorithm,
            clip_eps=learner.clip_eps,
            kl_coef=learner.kl_coef,
            epochs=learner.epochs,
            micro_batch=learner.micro_batch,
            max_grad_norm=learner.max_grad_norm,
        )
        updates = {m.id: by_slot[m.slot] for m in self.population.members}
        seconds["train"] = time.perf_counter() - t0
        faults += [{"id": i, "where": "update", "action": "skipped"} for i, u in updates.items() if not u.finite]
        faults += [
            {"id": i, "where": "reward", "action": "dropped", "samples": u.nonfinite_rewards}
            for i, u in updates.items()
            if u.nonfinite_rewards
        ]
        faults += self._repair_faults("after_update", streams.repair)

        self.league.count(outcome.games)
        outcomes = self.league.rate(outcome.pair_solve_rates)
        critic = self._rate_reviews(reviews, outcome, roles) if reviews is not None else None

        t0 = time.perf_counter()
        if self.config.evolution.fitness.name == "exam":
            self.exam_window.add(step, outcome.games)  # the next exam's problems
        births, extra = evolution_event(self, step, streams)  # extra: the event's fitness and breeder's record
        seconds["evolve"] = time.perf_counter() - t0
        seconds["total"] = time.perf_counter() - began
        self.step = step
        record = {**self._record(step, outcome, updates, outcomes, births, seconds, roles), **extra}
        if self.config.eval.every and step % self.config.eval.every == 0:  # a learning-curve point
            record["held_out_curve"] = held_out_curve(self)
        record["faults"] = faults
        if critic is not None:
            record["critic"] = critic
        self.bank.snapshot()
        timing = self.bank.timing()  # None in-process; per worker and phase on Ray
        if timing is not None:
            record["workers"], seconds["driver_overhead"] = timing["workers"], timing["driver_overhead"]
        return record, outcome.games

    def _review(self, outcome, np_rng) -> list[Review] | None:
        """The review game of the step (:func:`evolora.critic.review_step`) when the run has critics, else None."""
        review = self.arm.review
        if review is None or not self.population.role(review.solver):
            return None
        students, critics = self.population.players(review)
        return review_step(
            self.bank,
            self.tokenizer,
            self.task,
            outcome,
            students,
            critics,
            self.ratings,
            self.config.selfplay,
            np_rng=np_rng,
        )

    def _rate_reviews(self, reviews: list[Review], outcome, roles: dict[str, str]) -> dict:
        """Tally and rate the step's reviews; the step record's ``critic`` section."""
        self.league.count_reviews(reviews)
        rates = review_rates(reviews)
        outcomes = self.league.rate(rates, sides=self.arm.review.roles)
        lengths = metrics.response_length_stats(
            len(s.completion_ids)
            for i, role in roles.items()
            if role == self.arm.review.solver
            for s in outcome.samples[i]
        )
        return {
            **review_summary(reviews),
            "pair_agreement": {f"{s}|{c}": r for (s, c), r in rates.items()},
            "match_outcomes": outcomes,
            "response_length": lengths,
        }

    def _frozen(self) -> list[Individual]:
        """The hall-of-fame snapshots as frozen solvers (empty when the hall is off)."""
        return self.league.frozen(self.arm.game.solver)

    def _repair_faults(self, where: str, generator: torch.Generator) -> list[dict]:
        """Find individuals whose factors hold NaN/Inf and roll them back or cull them.

        ``learner.on_nonfinite = "rollback"`` restores the last finite factors (from the end
        of the previous step) with a fresh optimizer; ``"cull"`` replaces the individual by a
        mutated copy of the best finite member of its role, with a fresh rating.
        """
        events = []
        bad = set(self.bank.nonfinite([m.slot for m in self.population.members]))
        for member in [m for m in self.population.members if m.slot in bad]:
            action = self.config.learner.on_nonfinite
            if action == "rollback":
                self.bank.set_factors(member.slot, self.bank.last_finite(member.slot))
                self.league.reset_optimizer(member)
                events.append({"id": member.id, "where": where, "action": "rollback"})
            else:
                cull = self.league.cull(
                    member, self.bank, self.operators.mutation, step=self.step + 1, generator=generator
                )
                events.append({"id": member.id, "where": where, "action": "cull", **cull})
        return events

    def _record(self, step, outcome, updates, outcomes, births, seconds, roles: dict[str, str]) -> dict:
        games = outcome.games
        self.signatures.update(metrics.signature(g.problem) for g in games if g.valid and g.problem)
        return step_record(
            step,
            outcome,
            updates,
            outcomes,
            births,
            seconds,
            roles,
            members=self.population.members,
            ratings=self.ratings,
            coverage=metrics.coverage(self.signatures),
            complexity_kind=self.task.complexity_kind,
        )

    def train(self, callbacks: list[Callback] = (), steps: int | None = None) -> None:
        """Run until ``steps`` (default ``config.run.steps``) steps are done, calling callbacks after each."""
        target = self.config.run.steps if steps is None else steps
        while self.step < target:
            record, games = self.run_step()
            for callback in callbacks:
                callback(self, record, games)

    # -- checkpoints ------------------------------------------------------------------------
    def state(self) -> dict:
        """JSON-serialisable run state (everything but tensors)."""
        return {
            **self.league.state_dict(),
            "log_counts": dict(self.log_counts),
            "signatures": sorted(self.signatures),
            "problem_memory": self.memory.state_dict(),
            "exam_window": self.exam_window.state_dict(),
            "last_event": self.last_event,
        }

    def save_checkpoint(self) -> Path:
        """Write a resumable checkpoint of the current step."""
        factors = {slot: self.bank.get_factors(slot) for slot in self.bank.slots}
        optimizers = {i: opt.state_dict() for i, opt in self.optimizers.items()}
        return save_checkpoint(self.out_dir, self.step, factors=factors, optimizers=optimizers, state=self.state())

    def load_checkpoint(self, path: Path | None = None) -> bool:
        """Restore the newest (or given) checkpoint; False when the run has none yet."""
        path = path or latest_checkpoint(self.out_dir)
        if path is None:
            return False
        factors, optimizer_states, state = load_checkpoint(path, device=self.device)
        for slot, adapter in factors.items():
            self.bank.set_factors(slot, adapter)
        self.bank.snapshot()
        self.league.load_state_dict(state, optimizer_states)
        self.log_counts = dict(state["log_counts"])
        self.signatures = set(state["signatures"])
        if "problem_memory" in state:  # checkpoints written before the memory existed start it empty
            self.memory.load_state_dict(state["problem_memory"])
        if "exam_window" in state:  # likewise the exam window and the breeder's record
            self.exam_window.load_state_dict(state["exam_window"])
            self.last_event = state["last_event"]
        self.step = state["step"]
        return True

    # -- the end ------------------------------------------------------------------------------
    def evaluate(self, fitness: dict | None = None) -> tuple[dict[str, dict], dict]:
        """Greedy held-out accuracy of the students (and the base model when configured), by
        :func:`evolora.evaluation.held_out_accuracy`; every answer goes to ``final/held_out.jsonl``.
        ``eval.members``: every student, or the fittest by ``fitness`` (a
        :func:`evolora.fitness.fitness_record` of now; measured when not given). Returns (the results,
        the same members' :func:`evolora.evaluation.family.family_accuracy` record: {} without one)."""
        solvers = self.population.players(self.arm.game)[1]
        if self.config.eval.members == "fittest" and self.config.eval.enabled and len(solvers) > 1:
            record = fitness or fitness_now(self, measure=self.config.evolution.fitness.needs_dev_set)
            best = fittest(record, [m.id for m in solvers])
            solvers = [m for m in solvers if m.id == best]
        members = {m.slot: m.id for m in solvers}
        results, _ = held_out_accuracy(
            self.bank,
            self.tokenizer,
            self.task,
            members,
            self.config.eval,
            seed=self.config.run.seed,
            answers_path=self.out_dir / "final" / "held_out.jsonl",
        )
        family = family_accuracy(
            self.bank,
            self.tokenizer,
            self.task,
            members,
            self.config.eval,
            exclude=set(self.memory.answers),
            answers_path=self.out_dir / "final" / "held_out_family.jsonl",
        )
        return results, family

    def evaluate_critics(self) -> dict:
        """The held-out critic evaluation (:func:`evolora.critic.evaluation.critic_evaluation`) of a run with
        critics: the base and every student answer, the base and every critic (best rating first) judge.
        {} without critics or when evaluation is off."""
        review, evaluation = self.arm.review, self.config.eval
        critics = self.population.role(review.solver) if review is not None else []
        if not critics or not evaluation.enabled:
            return {}
        ranked = sorted(critics, key=lambda m: -self.ratings.conservative(m.id))
        selfplay = self.config.selfplay
        sampling = selfplay.sampling(review.proposer)
        return critic_evaluation(
            self.bank,
            self.tokenizer,
            self.task,
            {m.slot: m.id for m in self.population.role(review.proposer)},
            {m.slot: m.id for m in ranked},
            limit=evaluation.critic_limit,
            n=evaluation.critic_samples,
            sampling=sampling,
            max_new_tokens=evaluation.max_new_tokens,
            critic_max_new_tokens=selfplay.roles["critic"].max_new_tokens,
            batch_size=evaluation.batch_size,
            seed=self.config.run.seed,
        )

    def diversity(self) -> dict[str, float]:
        """Per role with >= 2 members: mean pairwise ‖ΔW_i − ΔW_j‖_F / mean ‖ΔW_i‖_F
        (:func:`evolora.operators.population_diversity`; 0 = identical members)."""
        roles: dict[str, list] = {}
        for member in self.population.members:
            roles.setdefault(member.role, []).append(self.bank.get_factors(member.slot))
        return {role: population_diversity(adapters) for role, adapters in roles.items() if len(adapters) > 1}

    def finish(self, *, evaluate: bool = True) -> dict:
        """Evaluate, write every individual to ``final/<id>/`` as a PEFT adapter and ``final/summary.json``."""
        record = fitness_now(self, measure=True) if evaluate and self.config.eval.enabled else None
        held_out, family = self.evaluate(record) if evaluate else ({}, {})
        final = self.out_dir / "final"
        for member in self.population.members:
            self.bank.save_adapter(member.slot, final / member.id)
        individuals = []
        for row in self.ratings.table([m.id for m in self.population.members]):
            member = self.population.by_id(row["id"])
            tally = self.tally.get(member.id, {})
            rate = (
                tally.get("correct", 0) / tally["attempts"]
                if tally.get("attempts")
                else tally.get("valid", 0) / tally["proposals"]
                if tally.get("proposals")
                else tally.get("agreed", 0) / tally["reviews"]
                if tally.get("reviews")
                else None
            )
            individuals.append(
                {
                    **row,
                    "role": member.role,
                    "parents": list(member.parents),
                    "games": tally,
                    "solve_or_valid_rate": rate,
                    "operator": member.operator,
                    "born_step": member.born_step,
                    "held_out": held_out.get(member.id),
                }
            )
        fitness = final_fitness(record, held_out, len(self.dev_items or [])) if record is not None else None
        summary = {
            "steps": self.step,
            "model": self.config.model.name,
            "task": self.config.task.name,
            "mode": self.config.selfplay.mode,
            "seed": self.config.run.seed,
            "hall_of_fame": self.hall.ids if self.hall else [],
            "held_out_source": self.task.held_out_source if evaluate else None,
            "individuals": individuals,
            "held_out": held_out,
            "held_out_members": self.config.eval.members if held_out else None,
            "lineage": self.lineage,
            "diversity": self.diversity(),
        }
        if fitness is not None:
            summary["fitness"] = fitness
        if family:  # only a run with eval.family on a task that has a family set has the key
            summary["held_out_family"] = family
        critic_eval = self.evaluate_critics() if evaluate else {}
        if critic_eval:  # only a run with critics has the key
            summary["critic_eval"] = critic_eval
        write_json_atomic(final / "summary.json", summary)
        return summary

    def close(self) -> None:
        """Release the bank's workers (Ray actors; nothing in-process). The run object is done after it."""
        self.bank.close()
