"""One Ray worker of a sharded population: a base-model replica and the adapters of its shard.

The driver (:class:`evolora.workers.ShardedBank`) wraps this class with ``ray.remote`` and
calls its methods through Ray; it never runs in the driver's process. The worker builds its
own base model from the run's ``model`` section, holds the LoRA factors of its slots in an
:class:`evolora.population.AdapterBank` and their AdamW optimizers, and runs rollouts, the
log-probs and the policy updates of those slots. What crosses the process boundary is token
ids, text, samples and rewards; factors and optimizer state only for evolution, rollback and
checkpoints. Source: PopuLoRA (arXiv 2605.16727) §2 (one frozen base shared by every adapter).

Methods that do work return their compute seconds last, so the driver can tell compute from
its own overhead (serialisation, transfer, waiting).
"""

from __future__ import annotations

import time

import torch

from evolora.learner import Sample, UpdateResult
from evolora.model import load_base, resolve_device
from evolora.population import AdapterBank
from evolora.rollout import Completion, RolloutStats


class WorkerRestarted(RuntimeError):
    """Ray restarted this worker (its adapters are blank) and the driver has not restored it yet."""


class Worker:
    """A base replica plus the adapter slots ``slots`` and their optimizers (PopuLoRA arXiv 2605.16727 §2).

    Args:
        model: the run's ``model`` section as a dict (name, dtype, num_threads, device).
        lora: the run's ``lora`` section as a dict (rank, alpha, target_modules).
        slots: the adapter slots this worker owns, in the run's slot order.

    Raises:
        ModelNotFoundError, ValueError: as :func:`evolora.model.load_base` and
            :class:`evolora.population.AdapterBank` (surfaced to the driver by Ray).
    """

    def __init__(self, model: dict, lora: dict, slots: list[str]):
        import warnings

        import ray

        with warnings.catch_warnings():  # Ray's own deprecation notice about actor_id inside the property
            warnings.simplefilter("ignore", DeprecationWarning)
            self.restarted = ray.get_runtime_context().was_current_actor_reconstructed
        threads = model.get("num_threads") or 1  # a worker shares its node with others: one thread unless told
        self.device = resolve_device(model.get("device", "cpu"))
        base, self.tokenizer = load_base(model["name"], dtype=model["dtype"], num_threads=threads, device=self.device)
        if self.device == "cuda":  # the rollout and update code builds its tensors on the default device
            torch.set_default_device(self.device)
        self.bank = AdapterBank(base, list(slots), rank=lora["rank"], alpha=lora["alpha"],
                                target_modules=tuple(lora["target_modules"]))
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

    # -- work -------------------------------------------------------------------------------
    def seed(self, value: int) -> None:
        """Seed this step's rollout sampling (torch's global RNG in this process)."""
        self._check()
        torch.manual_seed(value)

    def rollout(self, prompts: list[list[int]], adapters: list[str], routing: str, segments: tuple,
                options: dict) -> tuple[list[Completion], int, float]:
        """:meth:`evolora.population.AdapterBank.rollout` on this worker's rows: (completions in row
        order, tokens generated, seconds). ``options["generator_state"]`` seeds a private generator."""
        self._check()
        began, stats, options = time.perf_counter(), RolloutStats(), dict(options)
        state, seed = options.pop("generator_state", None), options.pop("generator_seed", None)
        if state is not None:  # a CPU generator's exact state; a GPU replica samples from its own, seeded alike
            options["generator"] = (torch.Generator().set_state(state) if self.device == "cpu"
                                    else torch.Generator(device=self.device).manual_seed(seed))
        done = self.bank.rollout(self.tokenizer, prompts, adapters, routing=routing, segments=segments, stats=stats,
                                 **options)
        return done, stats.tokens, time.perf_counter() - began

    def update(self, samples: dict[str, list[Sample]],
               settings: dict) -> tuple[dict[str, UpdateResult], list[str], float]:
        """One policy update of each slot in ``samples`` with its own optimizer: ({slot: result},
        the updated slots whose factors now hold NaN/Inf, seconds)."""
        self._check()
        began = time.perf_counter()
        results = self.bank.update({slot: (self.optimizers[slot], rows) for slot, rows in samples.items()}, **settings)
        return results, self.bank.nonfinite(list(samples)), time.perf_counter() - began

    def snapshot(self) -> None:
        """Keep the current factors of every slot here as its last finite ones."""
        self._check()
        self.bank.snapshot()

    # -- state ------------------------------------------------------------------------------
    def get_factors(self, slot: str) -> dict:
        self._check()
        return to_cpu(self.bank.get_factors(slot))

    def last_finite(self, slot: str) -> dict:
        self._check()
        return to_cpu(self.bank.last_finite(slot))

    def set_factors(self, slot: str, factors: dict) -> None:
        self.bank.set_factors(slot, factors)

    def adapter_state(self, slot: str) -> tuple:
        """(PEFT state dict, LoraConfig) of ``slot``, for a PEFT adapter directory written by the driver."""
        self._check()
        state, config = self.bank.adapter_state(slot)
        return to_cpu(state), config

    def new_optimizer(self, slot: str, lr: float, weight_decay: float) -> None:
        """Give ``slot`` a fresh AdamW (a founder, a child, a rolled-back member, a restore)."""
        self.optimizers[slot] = self.bank.new_optimizer(slot, lr=lr, weight_decay=weight_decay)

    def optimizer_state(self, slot: str) -> dict:
        self._check()
        return to_cpu(self.optimizers[slot].state_dict())

    def load_optimizer_state(self, slot: str, state: dict) -> None:
        self.optimizers[slot].load_state_dict(state)


def to_cpu(value):
    """``value`` with every tensor in it (nested dicts, lists, tuples) moved to the CPU, for a
    driver without a GPU; other values unchanged."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {key: to_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_cpu(item) for item in value)
    return value
