"""The population on a Ray cluster: adapter slots sharded over worker actors, one base replica each.

    bank = ShardedBank(config, slots)          # run.workers actors (evolora.worker.Worker), slot i on worker i mod N
    bank.rollout(tokenizer, prompts, adapters) # each row on its adapter's worker; results back in row order
    bank.update(jobs)                          # each worker updates its own slots with its own optimizers
    bank.get_factors / set_factors             # factors through the object store (evolution, checkpoints)

:class:`ShardedBank` offers the bank protocol of :class:`evolora.population.AdapterBank` (what
:class:`evolora.run.Run` calls), so the run, its league, matchmaking, evolution, logs and
checkpoints stay on the driver unchanged. Games cross workers: a teacher on worker A and its
student on worker B exchange only text and token ids. Determinism: the slot → worker map is
fixed by slot order, each worker seeds its sampling from (run seed, step, worker index)
(worker 0 exactly as the in-process run), and results merge in row and slot order, so
``workers=1`` replays the local run and ``workers=N`` replays itself. A worker that dies is
restarted by Ray (``max_restarts``); :func:`run_step_with_recovery` then restores every worker
from the last checkpoint and repeats the step. Source: PopuLoRA (arXiv 2605.16727) §2.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path
from typing import Callable

from evolora.checkpoint import latest_checkpoint
from evolora.factors import random_factors, write_adapter
from evolora.routed import BASE

MAX_RESTARTS = 3
"""Restarts Ray gives one worker (``max_restarts``), and attempts at one step after losing one."""

RESTART_TIMEOUT_S = 300.0
"""Seconds to wait for a restarted worker to answer before the cluster counts as lost."""

SEED_STRIDE = 1_000_000_007
"""Worker w seeds its step's sampling with ``rollout seed + w · SEED_STRIDE`` (worker 0: the local seed)."""


class WorkerLost(RuntimeError):
    """A Ray worker died or was restarted during a call; the step can be repeated from a checkpoint."""


class ClusterLost(WorkerLost):
    """The workers cannot be restored; the message names the run directory to ``--resume``
    (a :class:`WorkerLost` that no repeat of the step can repair)."""


class RemoteOptimizer:
    """A handle on one slot's AdamW, which lives on the slot's worker: ``state_dict`` and
    ``load_state_dict`` as torch's (the same format, so checkpoints do not depend on the backend;
    a child gets a fresh one on its slot's worker, PopuLoRA arXiv 2605.16727 §2 step 7)."""

    def __init__(self, bank: ShardedBank, slot: str):
        self.bank, self.slot = bank, slot

    def state_dict(self) -> dict:
        return self.bank._call(self.slot, "optimizer_state", self.slot)

    def load_state_dict(self, state: dict) -> None:
        self.bank._call(self.slot, "load_optimizer_state", self.slot, state)


class ShardedBank:
    """The adapter bank of a run spread over ``config.run.workers`` Ray actors (PopuLoRA arXiv 2605.16727 §2).

    Args:
        config: the validated run config (``run.backend: ray``; ``model`` and ``lora`` build each replica).
        slots: every adapter slot of the run in order (members, then hall-of-fame slots);
            slot i lives on worker ``i mod run.workers``.

    Attributes:
        slots, rank, alpha: as :class:`evolora.population.AdapterBank`. owner: {slot: worker index}.
        tokenizer: the replicas' tokenizer (fetched from worker 0). shapes: {module: (A shape, B shape)}.

    Raises:
        ConnectionError: ``run.ray_address`` names no running cluster (raised by ``ray.init``).
        WorkerLost: a worker died while starting (e.g. the model cannot be loaded there).
    """

    def __init__(self, config, slots: list[str]):
        import ray

        from evolora.worker import Worker

        workers = config.run.workers
        self.slots, self.rank, self.alpha = list(slots), config.lora.rank, config.lora.alpha
        self.owner = {slot: i % workers for i, slot in enumerate(self.slots)}
        if not ray.is_initialized():
            ray.init(address=config.run.ray_address, include_dashboard=False)
        self._placement, options = _placement(workers, gpu=config.model.device != "cpu")
        actor = ray.remote(max_restarts=MAX_RESTARTS)(Worker)
        model, lora = config.model.model_dump(), config.lora.model_dump(mode="json")
        self.actors = [actor.options(**options[w]).remote(model, lora, self.shard(w)) for w in range(workers)]
        self._seconds: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._overhead = 0.0
        self._pending: list = []  # calls sent without waiting (seed, snapshot); collected by the next wait
        self._bad: set[str] = set()  # slots whose factors hold NaN/Inf: set by updates, cleared by set_factors
        self._wait(None, time.perf_counter(), {w: a.ping.remote() for w, a in enumerate(self.actors)})
        self.shapes = self._call(self.slots[0], "factor_shapes")
        self.tokenizer = self._call(self.slots[0], "base_tokenizer")
        self.timing()  # start-up is not a step's cost

    def shard(self, worker: int) -> list[str]:
        """The slots of ``worker``, in slot order."""
        return [slot for slot in self.slots if self.owner[slot] == worker]

    # -- Ray calls ------------------------------------------------------------------------------
    def _wait(self, phase: str | None, began: float, refs: dict) -> dict:
        """{worker: value} of one call per worker; the wall time beyond the slowest worker's own
        seconds (the last item of a ``phase`` call's value) is the driver's overhead."""
        import ray

        from evolora.worker import WorkerRestarted

        try:
            pending, self._pending = self._pending, []
            ray.get(pending)  # in submission order on each worker, so these finished before ``refs`` ran
            values = dict(zip(refs, ray.get(list(refs.values()))))
        except (WorkerRestarted, ray.exceptions.RayActorError, ray.exceptions.RaySystemError) as error:
            raise WorkerLost(f"a Ray worker was lost ({type(error).__name__}: {str(error).splitlines()[0]})") from error
        wall = time.perf_counter() - began
        busy = 0.0
        if phase is not None:
            for worker, value in values.items():
                self._seconds[worker][phase] += value[-1]
                busy = max(busy, value[-1])
        self._overhead += max(0.0, wall - busy)
        return values

    def _call(self, slot: str, method: str, *args):
        """``method(*args)`` on the worker owning ``slot`` (``"__base__"``: worker 0), waited for."""
        worker = self._worker_of(slot)
        began = time.perf_counter()
        return self._wait(None, began, {worker: getattr(self.actors[worker], method).remote(*args)})[worker]

    def _worker_of(self, slot: str) -> int:
        if slot == BASE:
            return 0
        if slot not in self.owner:
            raise KeyError(f"unknown adapter slot {slot!r}; slots are {self.slots}")
        return self.owner[slot]

    def _each(self, phase: str | None, method: str, args: dict[int, tuple], *, wait: bool = True) -> dict:
        """``method`` on the workers in ``args`` ({worker: its arguments}), all at once, waited for
        (``wait=False``: sent now, its errors raised by the next call that waits)."""
        began = time.perf_counter()
        refs = {w: getattr(self.actors[w], method).remote(*a) for w, a in args.items()}
        if not wait:
            self._pending += refs.values()
            self._overhead += time.perf_counter() - began
            return {}
        return self._wait(phase, began, refs)

    # -- the bank protocol ------------------------------------------------------------------------
    def rollout(self, tokenizer, prompts: list[list[int]], adapters: list[str], *, routing: str = "routed",
                segments: tuple = (), stats=None, **options) -> list:
        """:meth:`evolora.population.AdapterBank.rollout` with each row on its adapter's worker
        (``"__base__"`` rows on worker 0); ``tokenizer`` is unused (each worker has the same one).
        A ``generator`` option travels as its state; each worker then starts from that state.

        Returns:
            N :class:`evolora.rollout.Completion`, in the order of ``prompts``.

        Raises:
            ValueError: ``prompts`` and ``adapters`` differ in length; KeyError: an unknown adapter.
        """
        if len(prompts) != len(adapters):
            raise ValueError(f"{len(prompts)} prompts but {len(adapters)} adapter names; give one name per prompt")
        generator = options.pop("generator", None)
        if generator is not None:
            options.update(generator_state=generator.get_state(), generator_seed=generator.initial_seed())
        rows: dict[int, list[int]] = defaultdict(list)
        for i, adapter in enumerate(adapters):
            rows[self._worker_of(adapter)].append(i)
        out = self._each("rollout", "rollout", {w: ([prompts[i] for i in r], [adapters[i] for i in r], routing,
                                                    tuple(segments), options) for w, r in sorted(rows.items())})
        completions: list = [None] * len(prompts)
        for worker, (done, _, _) in out.items():
            for i, completion in zip(rows[worker], done):
                completions[i] = completion
        if stats is not None and out:
            stats.tokens += sum(tokens for _, tokens, _ in out.values())
            stats.seconds += max(seconds for _, _, seconds in out.values())  # the workers run side by side
        return completions

    def update(self, jobs: dict, **settings) -> dict:
        """One policy update per slot of ``jobs`` ({slot: (its RemoteOptimizer, samples)}) on its
        worker, all workers at once (PopuLoRA arXiv 2605.16727 §2 step 5). Returns {slot: UpdateResult}
        in the order of ``jobs``.

        Raises:
            ValueError: an optimizer that is not the slot's own :class:`RemoteOptimizer`.
        """
        per_worker: dict[int, dict] = defaultdict(dict)
        for slot, (optimizer, samples) in jobs.items():
            if not (isinstance(optimizer, RemoteOptimizer) and optimizer.slot == slot):
                raise ValueError(f"slot {slot}: give the RemoteOptimizer of bank.new_optimizer({slot!r}, ...)")
            per_worker[self.owner[slot]][slot] = samples
        out = self._each("update", "update", {w: (samples, settings) for w, samples in sorted(per_worker.items())})
        merged = {slot: result for results, _, _ in out.values() for slot, result in results.items()}
        self._bad = (self._bad - set(merged)) | {slot for _, bad, _ in out.values() for slot in bad}
        return {slot: merged[slot] for slot in jobs}

    def new_optimizer(self, slot: str, *, lr: float, weight_decay: float) -> RemoteOptimizer:
        """A fresh AdamW for ``slot`` on its worker, and the driver's handle on it."""
        self._call(slot, "new_optimizer", slot, lr, weight_decay)
        return RemoteOptimizer(self, slot)

    def get_factors(self, slot: str) -> dict:
        """``slot``'s factors {module: (A (r, d_in), B (d_out, r))}, fetched from its worker."""
        return self._call(slot, "get_factors", slot)

    def set_factors(self, slot: str, factors: dict) -> None:
        """Write ``slot``'s factors on its worker (checked there as :meth:`AdapterBank.set_factors`:
        finite, or refused)."""
        self._call(slot, "set_factors", slot, factors)
        self._bad.discard(slot)

    def init_factors(self, slot: str, generator, *, b_std: float) -> None:
        """Draw ``slot``'s factors here (:func:`evolora.population.random_factors`, the same draws
        as in-process) and place them on its worker."""
        self.set_factors(slot, random_factors(self.shapes, generator, b_std=b_std))

    def last_finite(self, slot: str) -> dict:
        return self._call(slot, "last_finite", slot)

    def nonfinite(self, slots: list[str]) -> list[str]:
        """The slots of ``slots`` whose factors hold NaN or Inf, in the order given, without a call:
        only updates (which report them) and set_factors (finite or refused) change factors."""
        return [slot for slot in slots if slot in self._bad]

    def seed(self, value: int) -> None:
        """Seed every worker's sampling for one step: worker w with ``value + w · SEED_STRIDE``."""
        self._each(None, "seed", {w: (value + w * SEED_STRIDE,) for w in range(len(self.actors))}, wait=False)

    def snapshot(self) -> None:
        """Every worker keeps its slots' current factors as their last finite ones."""
        self._each(None, "snapshot", {w: () for w in range(len(self.actors))}, wait=False)

    def save_adapter(self, slot: str, directory: str | Path) -> Path:
        """Write ``slot`` as a PEFT adapter directory here (the worker sends its state dict)."""
        return write_adapter(directory, *self._call(slot, "adapter_state", slot))

    def timing(self) -> dict:
        """{"workers": {"w<i>": {phase: seconds}}, "driver_overhead": seconds} since the last call
        (phases: rollout, update); the overhead is wall time not spent computing on the slowest
        worker of each call (serialisation, transfer, scheduling, waiting)."""
        out = {"workers": {f"w{w}": {phase: self._seconds[w].get(phase, 0.0) for phase in ("rollout", "update")}
                           for w in range(len(self.actors))}, "driver_overhead": self._overhead}
        self._seconds.clear()
        self._overhead = 0.0
        return out

    # -- life cycle -------------------------------------------------------------------------------
    def reconnect(self) -> None:
        """Wait for every worker to answer (Ray restarts a dead one) and let restarted ones work again
        (the caller then restores their factors and optimizers).

        Raises:
            ClusterLost: a worker does not answer within :data:`RESTART_TIMEOUT_S`.
        """
        import ray

        try:
            ray.get([a.ping.remote() for a in self.actors], timeout=RESTART_TIMEOUT_S)
            ray.get([a.restored.remote() for a in self.actors], timeout=RESTART_TIMEOUT_S)
        except (ray.exceptions.RayError, ConnectionError) as error:
            raise ClusterLost(f"the Ray workers did not come back ({type(error).__name__})") from error

    def close(self) -> None:
        """Kill the workers and free their placement group (the cluster itself stays up)."""
        import ray

        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        if self._placement is not None:
            ray.util.remove_placement_group(self._placement)
        self.actors = []


def _placement(workers: int, *, gpu: bool) -> tuple[object | None, list[dict]]:
    """(placement group or None, ``.options`` of each worker): one GPU per worker through a
    placement group when the cluster has a GPU per worker (and ``gpu``), else a share of the CPUs."""
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    resources = ray.cluster_resources()
    cpus = min(1.0, resources.get("CPU", 1.0) / workers)
    if not gpu or resources.get("GPU", 0) < workers:
        return None, [{"num_cpus": cpus}] * workers
    group = ray.util.placement_group([{"CPU": cpus, "GPU": 1}] * workers, strategy="PACK")
    ray.get(group.ready(), timeout=RESTART_TIMEOUT_S)
    return group, [{"num_cpus": cpus, "num_gpus": 1, "scheduling_strategy": PlacementGroupSchedulingStrategy(
        group, placement_group_bundle_index=w)} for w in range(workers)]


def run_step_with_recovery(run, step: Callable[[], tuple]) -> tuple:
    """``step()``, and after a lost worker: restore every worker from the last checkpoint and
    repeat it (at most :data:`MAX_RESTARTS` times). The step seeds everything from (seed, step),
    so the repeat gives the records the undisturbed step would have given (one step of
    PopuLoRA, arXiv 2605.16727 §2). In-process runs never lose a worker: this is ``step()``.

    Raises:
        ClusterLost: no checkpoint of the current step to repeat from, the workers do not come
            back, or the step keeps failing; the message names ``run.out_dir`` to ``--resume``.
    """
    for attempt in range(MAX_RESTARTS + 1):
        try:
            return step()
        except WorkerLost as error:
            if attempt == MAX_RESTARTS:
                raise _lost(run, f"the step failed {attempt + 1} times ({error})") from error
            path = latest_checkpoint(run.out_dir)
            if path is None or path.name != f"step_{run.step:06d}":
                raise _lost(run, f"{error}, and there is no checkpoint of step {run.step} to repeat "
                            f"step {run.step + 1} from (run.checkpoint_every=1 keeps one)") from error
            try:
                run.bank.reconnect()
                run.load_checkpoint(path)
            except (WorkerLost, ClusterLost) as again:
                raise _lost(run, str(again)) from again
    raise AssertionError("unreachable")


def _lost(run, why: str) -> ClusterLost:
    return ClusterLost(f"lost the Ray cluster at step {run.step + 1}: {why}. The last checkpoint in {run.out_dir} "
                       f"is intact; continue with: evolora evolve --resume {run.out_dir}")
