"""The population on a Ray cluster: adapter slots sharded over worker actors, one base replica each.

    bank = ShardedBank(config, slots)          # run.workers actors (evolora.distributed.actor.Worker), slot i on worker i mod N
    bank.rollout(prompts, adapters, sampling)  # each row on its adapter's worker; results back in row order
    bank.update(jobs)                          # each worker updates its own slots with its own optimizers
    bank.logprobs(names, samples)              # teacher-forced log-probs, each row on its adapter's worker
    bank.get_factors / set_factors             # factors through the object store (evolution, checkpoints)

:class:`ShardedBank` offers the bank protocol of :class:`evolora.bank.local.AdapterBank` (what
:class:`evolora.run.Run` calls), so the run, its league, matchmaking, evolution, logs and
checkpoints stay on the driver unchanged. Games cross workers: a teacher on worker A and its
student on worker B exchange only text and token ids. Determinism: the slot → worker map is
fixed by slot order, each worker seeds its sampling from (run seed, step, worker index)
(worker 0 exactly as the in-process run), and results merge in row and slot order, so
``workers=1`` replays the local run and ``workers=N`` replays itself. Round trips: a step waits
for its rollouts and its update (and one prefetch of parents when it evolves); calls whose
result the driver does not need (seed, snapshot, set_factors, new_optimizer) ride on the
worker's next call, and tensors cross as numpy arrays. A worker that dies is
restarted by Ray (``max_restarts``); :func:`run_step_with_recovery` then restores every worker
from the last checkpoint and repeats the step. Source: PopuLoRA (arXiv 2605.16727) §2.
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import torch

from evolora.distributed.actor import pack, unpack
from evolora.distributed.placement import placement
from evolora.distributed.recovery import MAX_RESTARTS, RESTART_TIMEOUT_S, WorkerLost, wait_for_workers
from evolora.factors import check_factors, random_factors, write_adapter
from evolora.generation.engine import BATCH_SIZE
from evolora.generation.routed import BASE
from evolora.generation.types import Sampling

PREFETCH_MAX_BYTES = 1 << 19
"""Largest adapter (bytes of its factors) :meth:`ShardedBank.prefetch` fetches ahead. A prefetch
moves the whole parent pool to save round trips, which pays while one adapter costs less to move
than a round trip (~1 ms, the time of ~0.5 MB here): the tiny test model's 34 KB adapters are
prefetched, a SmolLM2-135M adapter at rank 8 (9.8 MB) is fetched on demand, parent by parent."""

SEED_STRIDE = 1_000_000_007
"""Worker w seeds its step's sampling with ``rollout seed + w · SEED_STRIDE`` (worker 0: the local seed)."""


class RemoteOptimizer:
    """A handle on one slot's AdamW, which lives on the slot's worker: ``state_dict`` and
    ``load_state_dict`` as torch's (the same format, so checkpoints do not depend on the backend;
    a child gets a fresh one on its slot's worker, PopuLoRA arXiv 2605.16727 §2 step 7)."""

    def __init__(self, bank: ShardedBank, slot: str):
        self.bank, self.slot = bank, slot

    def state_dict(self) -> dict:
        return unpack(self.bank._call(self.slot, "optimizer_state", self.slot))

    def load_state_dict(self, state: dict) -> None:
        self.bank._call(self.slot, "load_optimizer_state", self.slot, pack(state))


class ShardedBank:
    """The adapter bank of a run spread over ``config.run.workers`` Ray actors (PopuLoRA arXiv 2605.16727 §2).

    Args:
        config: the validated run config (``run.backend: ray``; ``model`` and ``lora`` build each replica).
        slots: every adapter slot of the run in order (members, then hall-of-fame slots);
            slot i lives on worker ``i mod run.workers``.

    Attributes:
        slots, rank, alpha, batch_size: as :class:`evolora.bank.local.AdapterBank`. owner: {slot: worker index}.
        device: the workers' device, ``cuda`` (one GPU each) or ``cpu``, as :func:`placement` decided.
        tokenizer: the replicas' tokenizer (fetched from worker 0). shapes: {module: (A shape, B shape)}.

    Raises:
        ConnectionError: ``run.ray_address`` names no running cluster (raised by ``ray.init``).
        WorkerLost: a worker died while starting (e.g. the model cannot be loaded there).
    """

    def __init__(self, config, slots: list[str]):
        import ray

        from evolora.distributed.actor import Worker

        workers = config.run.workers
        self.slots, self.rank, self.alpha = list(slots), config.lora.rank, config.lora.alpha
        self.owner = {slot: i % workers for i, slot in enumerate(self.slots)}
        if not ray.is_initialized():
            ray.init(address=config.run.ray_address, include_dashboard=False)
        self._placement, options = placement(workers, device=config.model.device)
        self.device = "cuda" if options[0].get("num_gpus") else "cpu"  # placement's decision, never the worker's guess
        self.batch_size = BATCH_SIZE[self.device]  # what each worker's engine takes when a rollout gives none
        actor = ray.remote(max_restarts=MAX_RESTARTS)(Worker)
        model, lora = {**config.model.model_dump(), "device": self.device}, config.lora.model_dump(mode="json")
        engine = config.generation.engine
        self.actors = [actor.options(**options[w]).remote(model, lora, self.shard(w), engine) for w in range(workers)]
        self._seconds: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._overhead = 0.0
        self._deferred: dict[int, list[tuple]] = defaultdict(list)  # ops that ride on the worker's next call (_send)
        self._pending: list = []  # deferred ops sent as tasks of their own; collected by the next wait
        self._bad: set[str] = set()  # slots whose factors hold NaN/Inf: set by updates, cleared by set_factors
        self._fetching: dict[str, tuple] = {}  # slot -> (worker, ObjectRef, index) of a prefetch on its way
        self._fetched: dict[str, dict] = {}  # slot -> its packed factors, prefetched and still current
        self._wait(None, time.perf_counter(), {w: a.ping.remote() for w, a in enumerate(self.actors)})
        self.shapes = self._call(self.slots[0], "factor_shapes")
        dtype = getattr(torch, self._call(self.slots[0], "factor_dtype"))
        self._meta = {
            name: (torch.empty(a, dtype=dtype, device="meta"), torch.empty(b, dtype=dtype, device="meta"))
            for name, (a, b) in self.shapes.items()
        }  # what set_factors checks against, here
        self._adapter_bytes = sum(t.numel() * t.element_size() for pair in self._meta.values() for t in pair)
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

        from evolora.distributed.actor import WorkerRestarted

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
        return self._each(None, method, {worker: args})[worker]

    def _defer(self, worker: int, op: tuple) -> None:
        """Queue ``op`` ((method, *args) of a call whose result the driver does not need: seed,
        snapshot, set_factors, new_optimizer) for ``worker``'s next call (:meth:`_send`)."""
        self._deferred[worker].append(op)

    def _send(self, worker: int, method: str, args: tuple):
        """Submit ``method(*args)`` to ``worker`` behind its deferred ops: they ride along as
        ``before`` on a rollout or an update (no Ray task of their own), else go first as tasks
        of their own. An actor runs one caller's tasks in submission order, so the ops take
        effect before the call either way, as they would in-process. Returns the call's ObjectRef."""
        actor, before = self.actors[worker], tuple(self._deferred.pop(worker, ()))
        if method in ("rollout", "update"):
            return getattr(actor, method).remote(*args, before)
        self._pending += [getattr(actor, name).remote(*op) for name, *op in before]
        return getattr(actor, method).remote(*args)

    def _worker_of(self, slot: str) -> int:
        if slot == BASE:
            return 0
        if slot not in self.owner:
            raise KeyError(f"unknown adapter slot {slot!r}; slots are {self.slots}")
        return self.owner[slot]

    def _each(self, phase: str | None, method: str, args: dict[int, tuple]) -> dict:
        """``method`` on the workers in ``args`` ({worker: its arguments}), all at once, waited for."""
        began = time.perf_counter()
        return self._wait(phase, began, {w: self._send(w, method, a) for w, a in args.items()})

    # -- the bank protocol ------------------------------------------------------------------------
    def rollout(
        self,
        prompts: list[list[int]],
        adapters: list[str],
        sampling: Sampling,
        *,
        segments: tuple = (),
        stats=None,
        **options,
    ) -> list:
        """:meth:`evolora.bank.local.AdapterBank.rollout` with each row on its adapter's worker
        (``"__base__"`` rows on worker 0); each worker's engine holds its own copy of the tokenizer.
        A ``generator`` option travels as its state; each worker then starts from that state. Each worker's
        bank generates with its own engine (``generation.engine``, resolved on the worker's device).
        One Ray call per worker with rows; the step's deferred seed and snapshot ride on it.

        Returns:
            N :class:`evolora.generation.rollout.Completion`, in the order of ``prompts``.

        Raises:
            ValueError: ``prompts`` and ``adapters`` differ in length; KeyError: an unknown adapter.
        """
        if len(prompts) != len(adapters):
            raise ValueError(f"{len(prompts)} prompts but {len(adapters)} adapter names; give one name per prompt")
        generator = options.pop("generator", None)
        if generator is not None:
            options.update(generator_state=pack(generator.get_state()))
        rows: dict[int, list[int]] = defaultdict(list)
        for i, adapter in enumerate(adapters):
            rows[self._worker_of(adapter)].append(i)
        out = self._each(
            "rollout",
            "rollout",
            {
                w: ([prompts[i] for i in r], [adapters[i] for i in r], sampling, tuple(segments), options)
                for w, r in sorted(rows.items())
            },
        )
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
        self._forget(jobs)
        out = self._each("update", "update", {w: (samples, settings) for w, samples in sorted(per_worker.items())})
        merged = {slot: result for results, _, _ in out.values() for slot, result in results.items()}
        self._bad = (self._bad - set(merged)) | {slot for _, bad, _ in out.values() for slot in bad}
        return {slot: merged[slot] for slot in jobs}

    def logprobs(self, names: list[str], samples: list) -> torch.Tensor:
        """:meth:`evolora.bank.local.AdapterBank.logprobs` with each row on its adapter's worker
        (``"__base__"`` rows together on the worker with the fewest rows, ties: the lowest index),
        all workers at once, reassembled in row order.

        Returns:
            (B, T_c) float32 log-probs (nats), 0 on padding; T_c: the longest completion.

        Raises:
            ValueError: ``names`` and ``samples`` differ in length. KeyError: an unknown adapter.
        """
        if len(names) != len(samples):
            raise ValueError(f"{len(samples)} samples but {len(names)} adapter names; give one name per sample")
        rows: dict[int, list[int]] = {w: [] for w in range(len(self.actors))}
        for i, name in enumerate(names):
            if name != BASE:
                rows[self._worker_of(name)].append(i)
        base = [i for i, name in enumerate(names) if name == BASE]
        if base:
            least = min(rows, key=lambda w: (len(rows[w]), w))
            rows[least] = sorted(rows[least] + base)
        rows = {w: r for w, r in rows.items() if r}
        out = self._each(
            "logprobs", "logprobs", {w: ([names[i] for i in r], [samples[i] for i in r]) for w, r in rows.items()}
        )
        values = torch.zeros(len(samples), max((len(s.completion_ids) for s in samples), default=0), device="cpu")
        for worker, (packed, _) in out.items():
            part = unpack(packed)
            values[rows[worker], : part.shape[1]] = part
        return values

    def new_optimizer(self, slot: str, *, lr: float, weight_decay: float) -> RemoteOptimizer:
        """A fresh AdamW for ``slot`` on its worker (deferred: made before the worker's next call),
        and the driver's handle on it."""
        self._defer(self._worker_of(slot), ("new_optimizer", slot, lr, weight_decay))
        return RemoteOptimizer(self, slot)

    def get_factors(self, slot: str) -> dict:
        """``slot``'s factors {module: (A (r, d_in), B (d_out, r))}: from its :meth:`prefetch` when one
        is current, else fetched from its worker. Fresh tensors on every call (as in-process)."""
        if slot in self._fetching:  # collect the whole prefetch: its calls ran side by side
            refs = {worker: ref for worker, ref, _ in self._fetching.values()}
            values = self._wait(None, time.perf_counter(), refs)
            self._fetched.update({other: values[worker][i] for other, (worker, _, i) in self._fetching.items()})
            self._fetching.clear()
        if slot in self._fetched:
            return unpack(self._fetched[slot])
        return unpack(self._call(slot, "get_factors", slot))

    def prefetch(self, slots: list[str]) -> None:
        """Start fetching the factors of ``slots`` (evolution's parent pool), one call per worker,
        without waiting, when one adapter is at most :data:`PREFETCH_MAX_BYTES`: the parents then
        cost one round trip in all instead of one each. A slot written (:meth:`set_factors`) or
        updated after the prefetch is fetched again on demand."""
        if self._adapter_bytes > PREFETCH_MAX_BYTES:
            return
        by_worker: dict[int, list[str]] = defaultdict(list)
        for slot in dict.fromkeys(slots):
            if slot not in self._fetching and slot not in self._fetched:
                by_worker[self._worker_of(slot)].append(slot)
        began = time.perf_counter()
        for worker, mine in sorted(by_worker.items()):
            ref = self._send(worker, "get_factors_many", (mine,))
            self._fetching.update({slot: (worker, ref, i) for i, slot in enumerate(mine)})
        self._overhead += time.perf_counter() - began

    def _forget(self, slots) -> None:
        """Drop the prefetched factors of ``slots`` (they are about to change)."""
        for slot in slots:
            self._fetching.pop(slot, None)
            self._fetched.pop(slot, None)

    def set_factors(self, slot: str, factors: dict) -> None:
        """Write ``slot``'s factors on its worker, deferred to the worker's next call (:meth:`_send`):
        they are checked here first, against the workers' shapes and dtype, as
        :meth:`AdapterBank.set_factors` checks them, so the worker does not refuse them later.

        Raises:
            KeyError: unknown ``slot``. ValueError: as :func:`evolora.factors.check_factors`
                (modules, shapes, NaN/Inf, overflow); nothing is sent then.
        """
        worker = self._worker_of(slot)
        check_factors(factors, self._meta, self.rank)
        self._forget([slot])
        began = time.perf_counter()
        self._defer(worker, ("set_factors", slot, pack(factors)))
        self._overhead += time.perf_counter() - began  # packing: the serialisation of a call
        self._bad.discard(slot)

    def init_factors(self, slot: str, generator, *, b_std: float) -> None:
        """Draw ``slot``'s factors here (:func:`evolora.population.random_factors`, the same draws
        as in-process) and place them on its worker."""
        self.set_factors(slot, random_factors(self.shapes, generator, b_std=b_std))

    def last_finite(self, slot: str) -> dict:
        return unpack(self._call(slot, "last_finite", slot))

    def nonfinite(self, slots: list[str]) -> list[str]:
        """The slots of ``slots`` whose factors hold NaN or Inf, in the order given, without a call:
        only updates (which report them) and set_factors (finite or refused) change factors."""
        return [slot for slot in slots if slot in self._bad]

    def seed(self, value: int) -> None:
        """Seed every worker's sampling for one step: worker w with ``value + w · SEED_STRIDE``
        (deferred: it rides on the worker's next call, see :meth:`_send`)."""
        for w in range(len(self.actors)):
            self._defer(w, ("seed", value + w * SEED_STRIDE))

    def snapshot(self) -> None:
        """Every worker keeps its slots' current factors as their last finite ones (deferred as :meth:`seed`)."""
        for w in range(len(self.actors)):
            self._defer(w, ("snapshot",))

    def save_adapter(self, slot: str, directory: str | Path) -> Path:
        """Write ``slot`` as a PEFT adapter directory here (the worker sends its state dict)."""
        state, lora_config = self._call(slot, "adapter_state", slot)
        return write_adapter(directory, unpack(state), lora_config)

    def timing(self) -> dict:
        """{"workers": {"w<i>": {phase: seconds}}, "driver_overhead": seconds} since the last call
        (phases: rollout, update); the overhead is wall time not spent computing on the slowest
        worker of each call (serialisation, transfer, scheduling, waiting)."""
        out = {
            "workers": {
                f"w{w}": {phase: self._seconds[w].get(phase, 0.0) for phase in ("rollout", "update")}
                for w in range(len(self.actors))
            },
            "driver_overhead": self._overhead,
        }
        self._seconds.clear()
        self._overhead = 0.0
        return out

    # -- life cycle -------------------------------------------------------------------------------
    def reconnect(self) -> None:
        """Wait for every worker to answer (Ray restarts a dead one) and let restarted ones work again
        (the caller then restores their factors and optimizers).

        Raises:
            ClusterLost: a worker is dead for good, or does not answer within :data:`RESTART_TIMEOUT_S`
                (:func:`evolora.distributed.recovery.wait_for_workers`).
        """
        self._pending, self._deferred = [], defaultdict(list)  # the step is repeated from a checkpoint
        self._fetching, self._fetched = {}, {}
        wait_for_workers(self.actors, "ping", RESTART_TIMEOUT_S)  # a restarting worker is waited for
        wait_for_workers(self.actors, "restored", RESTART_TIMEOUT_S)

    def close(self) -> None:
        """Kill the workers and free their placement group (the cluster itself stays up)."""
        import ray

        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        if self._placement is not None:
            ray.util.remove_placement_group(self._placement)
        self.actors = []
