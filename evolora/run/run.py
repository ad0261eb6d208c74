"""A PopuLoRA run: its construction, its state and checkpoints; the step and the end are modules of their own.

    run = Run(config, "runs/demo")              # loads the base once, builds the league
    run.train(callbacks=[...])                  # steps (evolora.run.step); callbacks log, checkpoint, show progress
    summary = run.finish()                      # held-out eval, final/ adapters, summary.json (evolora.run.end)

Each step plays the arm's pipeline of games (:attr:`evolora.game.Arm.pipeline`), each by its play
(:mod:`evolora.plays`), trains every member, rates and, every k steps, evolves
(:func:`evolora.run.step.run_step`). Each step seeds its own generators from (seed, step), one per
purpose (:mod:`evolora.streams`: rollouts, matchmaking, selection, variation, ...), so a run resumed
from a checkpoint replays exactly what the uninterrupted run would have done, and a change of
selection operator changes only the parents chosen. ``run.backend: ray`` puts the adapters on Ray
workers (:class:`evolora.distributed.sharded_bank.ShardedBank`, the same bank protocol as
:class:`evolora.bank.local.AdapterBank`); a lost worker is restarted, the workers restored from the
newest checkpoint and the steps since replayed (:func:`evolora.distributed.recovery.run_step_with_recovery`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from evolora.bank.from_config import bank_from_config
from evolora.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from evolora.config import Config, dump_config
from evolora.config.operator_choice import resolve_operators
from evolora.distributed.recovery import run_step_with_recovery
from evolora.exam import ExamWindow
from evolora.fitness import fitness_dev_set
from evolora.generation.registry import resolve_engine
from evolora.io import write_text_atomic
from evolora.league import League
from evolora.model.device import model_device, resolve_device
from evolora.population import Population
from evolora.run import end
from evolora.run.step import run_step
from evolora.selfplay import GameRecord
from evolora.selfplay.memory import ProblemMemory
from evolora.tasks import make_task

if TYPE_CHECKING:
    from evolora.bank import RunBank
    from evolora.hf_types import CausalLM, Tokenizer

Callback = Callable[["Run", dict, list[GameRecord]], None]
"""Called after every step with the run, the step's metrics record and its games."""
PhaseHook = Callable[[str], None]
"""Called with a phase's name at its start, between ops (:meth:`Run.phase`)."""


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
            self.bank = bank_from_config(model, tokenizer, slots, config)
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
        self.phase_hooks: list[PhaseHook] = []  # e.g. evolora.model.threads.ThreadPolicy.at_phase
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
        return run_step_with_recovery(self, lambda: run_step(self))

    def train(self, callbacks: list[Callback] = (), steps: int | None = None) -> None:
        """Run until ``steps`` (default ``config.run.steps``) steps are done, calling callbacks after each."""
        target = self.config.run.steps if steps is None else steps
        while self.step < target:
            record, games = self.run_step()
            for callback in callbacks:
                callback(self, record, games)

    def phase(self, name: str) -> None:
        """Call every hook of :attr:`phase_hooks` with ``name``: at the start of each play of a step
        (its play's name, e.g. ``selfplay``, ``review``), ``train``, ``evolve`` (the evolution event and
        its exam), ``fitness`` (the end's measure) and each held-out evaluation batch (``held_out``);
        never inside an op, so a hook may change torch's threads."""
        for hook in self.phase_hooks:
            hook(name)

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

    # -- the end (evolora.run.end) ------------------------------------------------------------
    def evaluate(self, fitness: dict | None = None) -> tuple[dict[str, dict], dict]:
        """Greedy held-out accuracy of the solvers and the base (:func:`evolora.run.end.evaluate`):
        (the results, the family record: {} without one)."""
        return end.evaluate(self, fitness)

    def evaluate_critics(self) -> dict:
        """The held-out critic evaluation of a run with critics
        (:func:`evolora.run.plays.evaluate_review`); {} without critics or when evaluation is off."""
        return end.evaluate_plays(self).get("critic_eval", {})

    def diversity(self) -> dict[str, float]:
        """Per role with >= 2 members, the mean pairwise distance of the adapters (:func:`evolora.run.end.diversity`)."""
        return end.diversity(self)

    def finish(self, *, evaluate: bool = True) -> dict:
        """Evaluate, write every individual to ``final/<id>/`` as a PEFT adapter and ``final/summary.json``
        (:func:`evolora.run.end.finish`); return the summary."""
        return end.finish(self, evaluate_held_out=evaluate)

    def close(self) -> None:
        """Release the bank's workers (Ray actors; nothing in-process). The run object is done after it."""
        self.bank.close()
