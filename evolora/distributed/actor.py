"""One Ray worker of a sharded population: a base-model replica and the adapters of its shard.

The driver (:class:`evolora.distributed.sharded_bank.ShardedBank`) wraps this class with ``ray.remote`` and
calls its methods through Ray; it never runs in the driver's process. The worker builds its
own base model from the run's ``model`` section, holds the LoRA factors of its slots in an
:class:`evolora.bank.local.AdapterBank` and their AdamW optimizers, and runs rollouts, the
log-probs and the policy updates of those slots. What crosses the process boundary is token
ids, text, samples and rewards; factors and optimizer state only for evolution, rollback and
checkpoints. Source: PopuLoRA (arXiv 2605.16727) §2 (one frozen base shared by every adapter).

Methods that do work return their compute seconds last, so the driver can tell compute from
its own overhead (serialisation, transfer, waiting). Tensors cross the boundary as numpy
arrays (:func:`pack`, :func:`unpack`): Ray moves those as raw buffers.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
import torch

from evolora.bank.from_config import bank_from_lora
from evolora.generation.types import Completion, RolloutStats, Sampling
from evolora.learner import Sample, UpdateResult
from evolora.model import load_base
from evolora.model.device import generator_on, resolve_device

DEFERRABLE = ("seed", "snapshot", "set_factors", "new_optimizer")
"""The calls the driver defers to a worker's next rollout or update (their results are not needed)."""


class WorkerRestarted(RuntimeError):
    """Ray restarted this worker (its adapters are blank) and the driver has not restored it yet."""


class Worker:
    """A base replica plus the adapter slots ``slots`` and their optimizers (PopuLoRA arXiv 2605.16727 §2).

    Args:
        model_config: the run's ``model`` section as a dict (name, dtype, num_threads, device).
        lora: the run's ``lora`` section as a dict (rank, alpha, target_modules).
        slots: the adapter slots this worker owns, in the run's slot order.
        engine: ``generation.engine`` (resolved on this worker's device: ``auto`` is graph on a GPU).

    Raises:
        ModelNotFoundError, ValueError: as :func:`evolora.model.load_base` and
            :class:`evolora.bank.local.AdapterBank` (surfaced to the driver by Ray).
    """

    def __init__(self, model_config: dict, lora: dict, slots: list[str], engine: str = "auto"):
        import os
        import warnings

        import ray

        from evolora.quiet import QUIET_ENV, quiet_libraries

        if os.environ.get(QUIET_ENV) == "1":  # the command line that started the run is quiet
            quiet_libraries()

        with warnings.catch_warnings():  # Ray's own deprecation notice about actor_id inside the property
            warnings.simplefilter("ignore", DeprecationWarning)
            self.restarted = ray.get_runtime_context().was_current_actor_reconstructed
        threads = model_config.get("num_threads")  # a worker shares its node with others: 1 unless an int is given
        threads = threads if isinstance(threads, int) else 1
        self.device = resolve_device(model_config.get("device", "auto"))  # Ray gives a GPU worker its own one
        base, self.tokenizer = load_base(
            model_config["name"],
            dtype=model_config["dtype"],
            num_threads=threads,
            device=self.device,
            prepack=model_config.get("prepack", "auto"),
        )
        self.bank = bank_from_lora(base, self.tokenizer, slots, lora, engine)  # as the in-process run builds it
        self.optimizers: dict[str, torch.optim.Optimizer] = {}

    def _check(self) -> None:
        if self.restarted:
            raise WorkerRestarted("this worker was restarted and holds blank adapters until the driver restores them")

    # -- life cycle -------------------------------------------------------------------------
    def ping(self) -> bool:
        """True when the worker was restarted and not restored yet (it is alive either way)."""
        return self.restarted

    def restored(self) -> None:
        """The driver has written every slot's factors and optimizer state back: work again."""
        self.restarted = False

    def base_tokenizer(self):
        """The replica's tokenizer (the driver tokenizes prompts with the same one)."""
        return self.tokenizer

    def factor_shapes(self) -> dict:
        """{module: (A shape (r, d_in), B shape (d_out, r))} of every adapter."""
        return self.bank.factor_shapes()

    def factor_dtype(self) -> str:
        """The torch dtype of the adapters' factors here, e.g. ``"float32"``."""
        return str(self.bank.parameters(self.bank.slots[0])[0].dtype).removeprefix("torch.")

    # -- work -------------------------------------------------------------------------------
    def seed(self, value: int) -> None:
        """Seed this step's rollout sampling (torch's global RNG in this process)."""
        self._check()
        torch.manual_seed(value)

    def _before(self, ops: tuple) -> None:
        """Run the driver's deferred calls ``(method, *args)``, in order (:data:`DEFERRABLE`): they
        ride on the next rollout or update instead of costing a Ray task each.

        Raises:
            ValueError: a method that cannot be deferred.
        """
        for name, *args in ops:
            if name not in DEFERRABLE:
                raise ValueError(f"{name} cannot ride on another call; deferrable: {DEFERRABLE}")
            getattr(self, name)(*args)

    def rollout(
        self,
        prompts: list[list[int]],
        adapters: list[str],
        sampling: Sampling,
        segments: tuple,
        options: dict,
        before: tuple = (),
    ) -> tuple[list[Completion], int, float]:
        """:meth:`evolora.bank.local.AdapterBank.rollout` on this worker's rows, after the ops
        ``before`` (:meth:`_before`): (completions in row order, tokens generated, seconds).
        ``options["generator_state"]`` (:func:`pack` ed) seeds a private generator."""
        self._check()
        self._before(before)  # before the clock: deferred ops count as the driver's overhead, as tasks of their own did
        began, stats, options = time.perf_counter(), RolloutStats(), dict(options)
        state = unpack(options.pop("generator_state", None))
        if state is not None:  # a CPU generator's exact state; a GPU replica samples from its own, seeded alike
            options["generator"] = generator_on(torch.Generator(device="cpu").set_state(state), self.device)
        done = self.bank.rollout(prompts, adapters, sampling, segments=segments, stats=stats, **options)
        return done, stats.tokens, time.perf_counter() - began

    def update(
        self, samples: dict[str, list[Sample]], settings: dict, before: tuple = ()
    ) -> tuple[dict[str, UpdateResult], list[str], float]:
        """One policy update of each slot in ``samples`` with its own optimizer, after the ops
        ``before``: ({slot: result}, the updated slots whose factors now hold NaN/Inf, seconds)."""
        self._check()
        self._before(before)
        began = time.perf_counter()
        results = self.bank.update({slot: (self.optimizers[slot], rows) for slot, rows in samples.items()}, **settings)
        return results, self.bank.nonfinite(list(samples)), time.perf_counter() - began

    def logprobs(self, names: list[str], samples: list[Sample]) -> tuple:
        """:meth:`evolora.bank.local.AdapterBank.logprobs` of this worker's rows: (the (B, T_c)
        float32 log-probs, :func:`pack` ed; seconds)."""
        self._check()
        began = time.perf_counter()
        values = self.bank.logprobs(names, samples)
        return pack(values), time.perf_counter() - began

    def snapshot(self) -> None:
        """Keep the current factors of every slot here as its last finite ones."""
        self._check()
        self.bank.snapshot()

    # -- state ------------------------------------------------------------------------------
    def get_factors(self, slot: str) -> dict:
        self._check()
        return pack(self.bank.get_factors(slot))

    def get_factors_many(self, slots: list[str]) -> list[dict]:
        """The :func:`pack` ed factors of each of ``slots``, in order (one call for a prefetch)."""
        self._check()
        return [pack(self.bank.get_factors(slot)) for slot in slots]

    def last_finite(self, slot: str) -> dict:
        self._check()
        return pack(self.bank.last_finite(slot))

    def set_factors(self, slot: str, factors: dict) -> None:
        """Write ``slot``'s factors, :func:`pack` ed ({module: (A, B)} as arrays)."""
        self.bank.set_factors(slot, unpack(factors))

    def adapter_state(self, slot: str) -> tuple:
        """(PEFT state dict, LoraConfig) of ``slot``, for a PEFT adapter directory written by the driver."""
        self._check()
        state, config = self.bank.adapter_state(slot)
        return pack(state), config

    def new_optimizer(self, slot: str, lr: float, weight_decay: float) -> None:
        """Give ``slot`` a fresh AdamW (a founder, a child, a rolled-back member, a restore)."""
        self.optimizers[slot] = self.bank.new_optimizer(slot, lr=lr, weight_decay=weight_decay)

    def optimizer_state(self, slot: str) -> dict:
        self._check()
        return pack(self.optimizers[slot].state_dict())

    def load_optimizer_state(self, slot: str, state: dict) -> None:
        """Load ``slot``'s AdamW state, :func:`pack` ed (torch's ``state_dict`` format)."""
        self.optimizers[slot].load_state_dict(unpack(state))


class Bits(NamedTuple):
    """A tensor whose dtype numpy lacks (bfloat16, float8) in transit: its raw bits as a numpy
    integer array of the same itemsize, and the torch dtype's name."""

    bits: np.ndarray
    dtype: str


def pack(value):
    """``value`` with every tensor in it (nested dicts, lists, tuples) as a CPU numpy array
    (:class:`Bits` for a dtype numpy lacks), bit for bit; other values unchanged.

    Ray pickles a torch tensor through ``torch.save`` (~0.2 ms each: 5 ms for the 28 tensors of
    a tiny adapter, 240 ms for a SmolLM2-135M one) but moves numpy arrays as raw buffers
    (0.1 ms, 35 ms), so factors, optimizer and adapter states cross the boundary packed.
    """
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous()
        if tensor.dtype in _BITS:
            return Bits(tensor.view(_BITS[tensor.dtype]).numpy(), str(tensor.dtype).removeprefix("torch."))
        return tensor.numpy()
    if isinstance(value, dict):
        return {key: pack(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)) and not isinstance(value, Bits):
        return type(value)(pack(item) for item in value)
    return value


def unpack(value):
    """The inverse of :func:`pack`: numpy arrays (and :class:`Bits`) back to torch tensors of their
    dtype, each a writable copy of its own (arrays from Ray's object store are read-only)."""
    if isinstance(value, Bits):
        return torch.from_numpy(value.bits.copy()).view(getattr(torch, value.dtype))
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    if isinstance(value, dict):
        return {key: unpack(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(unpack(item) for item in value)
    return value


_BITS = {torch.bfloat16: torch.int16, torch.float8_e4m3fn: torch.int8, torch.float8_e5m2: torch.int8}
