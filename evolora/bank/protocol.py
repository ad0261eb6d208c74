"""The adapter bank interface: what the run, the league and the operators ask of a bank.

Two banks implement it: :class:`evolora.bank.local.AdapterBank` (every adapter in this process,
on one base model) and :class:`evolora.distributed.sharded_bank.ShardedBank` (the adapters sharded
over Ray workers, each with its own base). Code that takes a ``bank`` types it with :class:`Bank`,
so the two stay interchangeable by contract, not by convention.

A *slot* is a bank position holding one adapter's factors (A: (r, d_in), B: (d_out, r) per
target module); individuals move between slots only through :meth:`Bank.set_factors`.
Source: PopuLoRA (arXiv 2605.16727) §2 (one frozen base shared by every adapter).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from evolora.generation.types import RoutedBank, Sampling

if TYPE_CHECKING:
    import torch


@runtime_checkable
class Bank(Protocol):
    """The operations every adapter bank offers (local or on Ray workers)."""

    slots: list[str]
    """The bank's slot names: the members' slots, then the hall of fame's."""
    batch_size: int
    """Rows per decode batch when a rollout gives none: the engine's default for the bank's device
    (:data:`evolora.generation.engine.BATCH_SIZE`)."""

    def init_factors(self, slot: str, generator: torch.Generator, *, b_std: float) -> None:
        """Draw the slot's initial factors (A Kaiming-uniform, B Gaussian with std ``b_std``)."""

    def get_factors(self, slot: str) -> dict:
        """{module: (A, B)} of the slot, fp32 tensors (a copy)."""

    def set_factors(self, slot: str, factors: dict) -> None:
        """Write {module: (A, B)} into the slot (the shapes must match the bank's)."""

    def last_finite(self, slot: str) -> dict:
        """The slot's factors at the last :meth:`snapshot` where they were all finite."""

    def nonfinite(self, slots: list[str]) -> list[str]:
        """The slots among ``slots`` whose factors hold NaN or Inf."""

    def snapshot(self) -> None:
        """Remember every slot's finite factors (what :meth:`last_finite` returns)."""

    def new_optimizer(self, slot: str, *, lr: float, weight_decay: float) -> Any:
        """A fresh AdamW over the slot's factors."""

    def update(self, jobs: dict, **settings: Any) -> dict:
        """One RL update per slot: ``jobs`` is {slot: (optimizer, samples)}; returns {slot: result}."""

    def rollout(self, prompts: list[list[int]], adapters: list[str], sampling: Sampling, **options: Any) -> list:
        """One completion per prompt, prompt i with the adapter in slot ``adapters[i]``, as ``sampling``
        (:class:`evolora.generation.types.Sampling`) says, by the bank's engine (which holds the tokenizer)."""

    def logprobs(self, names: list[str], samples: list) -> Any:
        """Per-token log-probs of ``samples`` under each named slot."""

    def prefetch(self, slots: list[str]) -> None:
        """Hint that these slots are used next (a no-op where nothing is remote)."""

    def seed(self, value: int) -> None:
        """Seed the bank's sampling generators."""

    def save_adapter(self, slot: str, directory: str | Path) -> None:
        """Write the slot as a PEFT adapter directory."""

    def timing(self) -> dict | None:
        """Per-worker seconds of the last step, or None where there are no workers."""

    def close(self) -> None:
        """Release the bank's resources (workers, mapped memory)."""


BANK_METHODS: tuple[str, ...] = tuple(name for name in vars(Bank) if not name.startswith("_"))
"""The names of the interface's methods (what a conformance test checks)."""


@runtime_checkable
class LocalBank(Bank, RoutedBank, Protocol):
    """A bank whose adapters sit in this process on ``model`` (:class:`evolora.bank.local.AdapterBank`):
    what the routed engine, the learner's forward passes and the DEAP genomes reach into
    (``model``, ``slots``, ``rank``, ``alpha``, ``layers``: :class:`evolora.generation.types.RoutedBank`)."""

    def parameters(self, slot: str) -> list:
        """The slot's trainable fp32 factor tensors (A and B of every module)."""

    def activate(self, slot: str) -> None:
        """Route every row through ``slot`` (single-adapter forward passes)."""


@runtime_checkable
class RemoteBank(Bank, Protocol):
    """A bank whose adapters live on Ray workers (:class:`evolora.distributed.sharded_bank.ShardedBank`):
    what a run asks of it beyond :class:`Bank`."""

    tokenizer: Any
    """The base model's tokenizer, fetched from a worker (the run tokenizes prompts with it)."""

    def reconnect(self) -> None:
        """Wait for every worker (Ray restarts a dead one); the caller then restores a checkpoint."""


RunBank = LocalBank | RemoteBank
"""What :attr:`evolora.run.Run.bank` holds: the in-process bank (its ``model`` read for the device)
or the Ray bank (its ``tokenizer`` and ``reconnect`` read by the run and its recovery)."""
