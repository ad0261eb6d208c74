"""The adapter bank: a frozen base model carrying one named LoRA adapter per population slot.

The heavy half of the population: an :class:`evolora.population.Individual` is a cheap handle
(id, role, slot, lineage); its LoRA factors live here, in one PEFT model with one named adapter
per slot. Children overwrite the factors of the slot they take over, so the bank never grows and
the base model is loaded once. The bank owns the rollout engine (:mod:`evolora.generation.engine`).

Source: PopuLoRA (arXiv 2605.16727) §1-2 (one frozen base shared by every adapter; a child
takes over the slot of the individual it replaces).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from peft.utils import get_peft_model_state_dict

from evolora.factors import check_factors, random_factors, write_adapter
from evolora.generation import heap
from evolora.generation.engine import Engine, make_engine
from evolora.generation.routed import BASE
from evolora.generation.types import Completion, RolloutStats, Sampling
from evolora.learner import make_optimizer, policy_update_many
from evolora.model.device import generator_on, model_device
from evolora.model.targets import ALL_LINEAR, resolve_target_modules
from evolora.operators import Adapter
from evolora.schedule import set_lr

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM, Tokenizer


class AdapterBank:
    """A frozen base model carrying one named LoRA adapter per population slot.

    Factors per target module: A: (r, d_in), B: (d_out, r); ΔW = (alpha / r) · B A.
    Module keys are the base model's module paths, e.g. ``model.layers.0.self_attn.q_proj``.

    Args:
        base: a ``transformers`` causal LM (frozen; never modified).
        slots: adapter names, one per population slot (e.g. ``["T0", "T1", "S0", "S1"]``).
        rank, alpha, target_modules: LoRA shape, as in :class:`evolora.config.LoRAConfig`
            (``all-linear`` resolved by :func:`evolora.model.targets.resolve_target_modules`).
        tokenizer: the base's tokenizer (a pad token is required), given to the engine once; None:
            a bank that scores and trains but cannot generate.
        engine: ``generation.engine``, the engine that generates the rollouts and scores the
            samples: a registered name or ``package.module:Class``
            (:func:`evolora.generation.engine.make_engine`; ``auto``: graph on CUDA, else eager).

    Attributes:
        engine: the :class:`evolora.generation.engine.Engine` the bank owns; told of every factor
            write (:meth:`set_factors`, :meth:`update`) through its ``refresh``.

    Raises:
        ValueError: when ``rank`` exceeds a target module's smaller dimension, a target name
            matches no linear layer, or the engine is unknown or cannot run here.
    """

    def __init__(
        self,
        base: CausalLM,
        slots: list[str],
        *,
        rank: int,
        alpha: float,
        target_modules: tuple[str, ...] | str = ALL_LINEAR,
        tokenizer: Tokenizer | None = None,
        engine: str = "auto",
    ):
        if not slots:
            raise ValueError("an adapter bank needs at least one slot")
        target_modules = resolve_target_modules(base, target_modules)
        self.target_modules = target_modules
        self.rank = rank
        self.alpha = alpha
        self.lora_config = LoraConfig(
            r=rank, lora_alpha=alpha, target_modules=list(target_modules), lora_dropout=0.0, bias="none"
        )
        _check_rank(base, rank, target_modules)
        with warnings.catch_warnings():  # PEFT reads transformers' deprecated is_gradient_checkpointing
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            self.model: PeftModel = get_peft_model(base, self.lora_config, adapter_name=slots[0])
        for slot in slots[1:]:
            self.model.add_adapter(slot, self.lora_config)
        self.slots = list(slots)
        self.layers: dict[str, LoraLayer] = {
            name.removeprefix("base_model.model."): module
            for name, module in self.model.named_modules()
            if isinstance(module, LoraLayer)
        }
        self._good: dict[str, Adapter] = {}  # slot -> its last finite factors (see snapshot)
        self.model.eval()
        self.engine: Engine = make_engine(engine, self.model, tokenizer, self)

    @property
    def batch_size(self) -> int:
        """Rows per decode batch when a rollout gives none: the engine's default for the device."""
        return self.engine.batch_size

    # -- factors -------------------------------------------------------------------------
    def get_factors(self, slot: str) -> Adapter:
        """A detached copy of ``slot``'s factors: {module: (A (r, d_in), B (d_out, r))}."""
        self._check_slot(slot)
        return {
            name: (layer.lora_A[slot].weight.detach().clone(), layer.lora_B[slot].weight.detach().clone())
            for name, layer in self.layers.items()
        }

    @torch.no_grad()
    def set_factors(self, slot: str, factors: Adapter) -> None:
        """Overwrite ``slot``'s factors in place: all modules or none.

        Every module is checked before anything is copied, so a rejected adapter leaves the
        slot bit-identical to before (PopuLoRA (arXiv 2605.16727) §2: children overwrite the
        slot they take over; a bad child must not leave half of one behind).

        Args:
            factors: {module: (A (r, d_in), B (d_out, r))}, floating-point tensors of any
                float dtype (cast to the bank's), the same module names as the bank.

        Raises:
            KeyError: unknown ``slot``.
            ValueError: module names differ from the bank's (missing or unknown), a factor is not a
                floating-point tensor, its shape differs (rank ≠ ``self.rank``), or it holds NaN/Inf.
        """
        self._check_slot(slot)
        check_factors(
            factors,
            {name: (layer.lora_A[slot].weight, layer.lora_B[slot].weight) for name, layer in self.layers.items()},
            self.rank,
        )
        for name, layer in self.layers.items():
            layer.lora_A[slot].weight.copy_(factors[name][0])
            layer.lora_B[slot].weight.copy_(factors[name][1])
        self.engine.refresh([slot])

    def init_factors(self, slot: str, generator: torch.Generator, *, b_std: float) -> None:
        """Give ``slot`` diverse non-zero ΔW drawn by :func:`random_factors` (design §3)."""
        self.set_factors(slot, random_factors(self.factor_shapes(), generator, b_std=b_std))

    def factor_shapes(self) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
        """{module: (A shape (r, d_in), B shape (d_out, r))}, in the bank's module order."""
        return {
            name: (tuple(layer.lora_A[self.slots[0]].weight.shape), tuple(layer.lora_B[self.slots[0]].weight.shape))
            for name, layer in self.layers.items()
        }

    def parameters(self, slot: str) -> list[torch.nn.Parameter]:
        """The trainable tensors of ``slot`` (A and B of every module), in a fixed order."""
        self._check_slot(slot)
        params = []
        for layer in self.layers.values():
            params += [layer.lora_A[slot].weight, layer.lora_B[slot].weight]
        return params

    def num_parameters(self) -> int:
        """Floats in one adapter (e.g. 2.44 M for SmolLM2-135M at rank 8 on all linear modules)."""
        return sum(p.numel() for p in self.parameters(self.slots[0]))

    def activate(self, slot: str) -> None:
        """Make ``slot`` the single active adapter, trainable; every other slot is frozen."""
        self._check_slot(slot)
        self.model.set_adapter(slot)
        for other in self.slots:
            for param in self.parameters(other):
                param.requires_grad_(other == slot)

    # -- the bank protocol of a run (evolora.distributed.sharded_bank.ShardedBank offers the same over Ray actors) --
    def rollout(
        self,
        prompts: list[list[int]],
        adapters: list[str],
        sampling: Sampling,
        *,
        segments: tuple = (),
        stats: RolloutStats | None = None,
        batch_size: int | None = None,
        generator: torch.Generator | None = None,
    ) -> list[Completion]:
        """One completion per (prompt, adapter) row, by the bank's :attr:`engine`
        (:meth:`evolora.generation.engine.Engine.generate`).

        Args:
            prompts: N token id lists; adapters: N slot names (or ``"__base__"``).
            sampling: how tokens are chosen and where rows stop (:class:`evolora.generation.types.Sampling`).
            segments: a multi-segment rollout's structure (empty: free form).
            batch_size: rows per decode batch; None: the engine's default for the device.
            generator: the sampling RNG; one on another device than the model's is replaced by one
                there with its seed (:func:`evolora.model.device.generator_on`).

        Returns:
            N :class:`evolora.generation.types.Completion`, in the order of ``prompts``.
        """
        if generator is not None:  # sampling draws on the model's device
            generator = generator_on(generator, model_device(self.model))
        return self.engine.generate(
            prompts,
            adapters,
            sampling,
            segments=tuple(segments),
            batch_size=batch_size,
            stats=stats,
            generator=generator,
        )

    def update(self, jobs: dict[str, tuple[torch.optim.Optimizer, list]], lr: float | None = None, **settings) -> dict:
        """One GRPO / REINFORCE++ update per slot: :func:`evolora.learner.policy_update_many`
        (PopuLoRA arXiv 2605.16727 §2 step 5), with blocks >= 1 MB mmapped
        (:func:`evolora.generation.heap.mapped_blocks`), after the rollouts' freed blocks are given back
        (:func:`evolora.generation.heap.trim`): a gsm update's activations then start from live memory and
        leave no holes in the heap (3 default gsm steps, 1 thread: peak RSS 2424 -> 2339 MB, CPU
        time +1.3 %). ``lr``: this step's learning rate for every job's optimizer
        (:func:`evolora.schedule.scheduled_lr`); None keeps theirs. Returns {slot: UpdateResult}."""
        if lr is not None:
            set_lr((optimizer for optimizer, _ in jobs.values()), lr)
        heap.trim()
        with heap.mapped_blocks():
            results = policy_update_many(self, jobs, **settings)
        self.engine.refresh(list(jobs))
        return results

    @torch.no_grad()
    def logprobs(self, names: list[str], samples: list) -> torch.Tensor:
        """Teacher-forced log-probs (B, T_c) float32 (nats) of each sample's completion under its
        adapter ``names[i]`` (or ``"__base__"``), no gradient, 0 on padding (T_c: the longest
        completion): :func:`evolora.generation.completion.routed_logprobs` (PopuLoRA arXiv 2605.16727 §2 step 5).

        Raises:
            ValueError: ``names`` and ``samples`` differ in length. KeyError: an unknown adapter.
        """
        if len(names) != len(samples):
            raise ValueError(f"{len(samples)} samples but {len(names)} adapter names; give one name per sample")
        for name in sorted(set(names) - {BASE}):
            self._check_slot(name)
        return self.engine.logprobs(list(names), list(samples))

    def new_optimizer(self, slot: str, *, lr: float, weight_decay: float) -> torch.optim.Optimizer:
        """A fresh AdamW over ``slot``'s parameters (founders, children, rolled-back members)."""
        return make_optimizer(self.parameters(slot), lr=lr, weight_decay=weight_decay)

    def prefetch(self, slots: list[str]) -> None:
        """A hint that :meth:`get_factors` of ``slots`` comes next (evolution's parent pool); nothing
        to fetch in-process. :meth:`evolora.distributed.sharded_bank.ShardedBank.prefetch` starts the transfers."""

    def nonfinite(self, slots: list[str]) -> list[str]:
        """The slots of ``slots`` whose factors hold NaN or Inf (checked without copies), in order."""
        return [slot for slot in slots if not all(bool(torch.isfinite(p).all()) for p in self.parameters(slot))]

    def seed(self, value: int) -> None:
        """Seed the rollouts' sampling (torch's global RNG) for one step."""
        torch.manual_seed(value)

    @torch.no_grad()
    def snapshot(self) -> None:
        """Keep every slot's current factors as its last finite ones (:meth:`last_finite`), copied
        into the buffers of the previous snapshot (new buffers only for a new slot)."""
        for slot in self.slots:
            held = self._good.get(slot)
            if held is None:
                self._good[slot] = self.get_factors(slot)
                continue
            for name, layer in self.layers.items():
                held[name][0].copy_(layer.lora_A[slot].weight)
                held[name][1].copy_(layer.lora_B[slot].weight)

    def last_finite(self, slot: str) -> Adapter:
        """``slot``'s factors at the last :meth:`snapshot` (the end of the previous step)."""
        return self._good[slot]

    def timing(self) -> dict | None:
        """Per-worker seconds since the last call; None in-process (the step's seconds say it all)."""

    def close(self) -> None:
        """Release what the bank holds outside this process (nothing here)."""

    # -- saving ----------------------------------------------------------------------------
    def save_adapter(self, slot: str, directory: str | Path) -> Path:
        """Write ``slot`` as a standard PEFT adapter directory, atomically (:func:`write_adapter`).

        The result holds ``adapter_config.json`` and ``adapter_model.safetensors`` and loads
        with ``PeftModel.from_pretrained(base, directory)``.
        """
        return write_adapter(directory, *self.adapter_state(slot))

    def adapter_state(self, slot: str) -> tuple[dict[str, torch.Tensor], LoraConfig]:
        """``slot``'s PEFT state dict ({key: tensor}, detached) and its ``LoraConfig``."""
        self._check_slot(slot)
        state = get_peft_model_state_dict(self.model, adapter_name=slot)
        return {k: v.detach().contiguous() for k, v in state.items()}, self.model.peft_config[slot]

    def load_adapter(self, slot: str, directory: str | Path) -> None:
        """Read a PEFT adapter directory written by :meth:`save_adapter` into ``slot``.

        Raises:
            FileNotFoundError: no ``adapter_model.safetensors`` in ``directory``.
            ValueError: its modules, rank or values do not fit the bank (see :meth:`set_factors`).
        """
        from safetensors.torch import load_file

        path = Path(directory) / "adapter_model.safetensors"
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist; give a directory written by evolora (final/<id>/)")
        state = load_file(str(path))
        factors: dict[str, list] = {}
        for key, tensor in state.items():
            module, _, kind = key.removeprefix("base_model.model.").rpartition(".lora_")
            factors.setdefault(module, [None, None])["AB".index(kind[0])] = tensor
        self.set_factors(slot, {module: (a, b) for module, (a, b) in factors.items()})

    def _check_slot(self, slot: str) -> None:
        if slot not in self.slots:
            raise KeyError(f"unknown adapter slot {slot!r}; slots are {self.slots}")


def _check_rank(base: CausalLM, rank: int, target_modules: tuple[str, ...]) -> None:
    matched = False
    for name, module in base.named_modules():
        if isinstance(module, torch.nn.Linear) and name.split(".")[-1] in target_modules:
            matched = True
            limit = min(module.in_features, module.out_features)
            if rank > limit:
                raise ValueError(
                    f"lora.rank={rank} exceeds the smaller dimension ({limit}) of module {name}; "
                    f"set lora.rank <= {limit}"
                )
    if not matched:
        names = sorted({n.split(".")[-1] for n, m in base.named_modules() if isinstance(m, torch.nn.Linear)})
        raise ValueError(f"lora.target_modules {list(target_modules)} match no linear module; the model has {names}")
