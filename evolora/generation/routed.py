"""Routed multi-adapter LoRA: every batch row through its own adapter, in one pass.

PEFT's mixed-adapter batches loop over adapters inside every LoRA layer (measured 0.5-0.7x
the base model's tokens/s with 4 adapters) and do not train. Here the base model runs with
adapters disabled and a forward hook on each adapted linear layer adds the routed delta

    x: (N, T, d_in),  A: (P, r, d_in),  B: (P, d_out, r),  route: (N,) ∈ {−1, 0..P−1}
    y = W x + s · B[route] (A[route] x)          (rows with route −1 get the bare base)

over the P adapters in use, by one of two layouts of the stacked-LoRA layer
(:mod:`evolora.generation.lora_stack`, where fused kernels plug in):

* ``train=False`` (rollouts, log-probs without gradient): the rows of each adapter are
  gathered into one slab xg: (P, n·T, d_in) (n = rows of the busiest adapter, the others
  padded) and two batched matmuls hᵀ = A xgᵀ: (P, r, n·T) and B h: (P, n·T, d_out) are added
  back to the rows in place (``index_add_``; no gather at all when the rows come grouped in
  equal groups). Each row meets only its own adapter's factors (the masked dense version
  below does P times the LoRA flops: SmolLM2-135M, batch 8 over 8 adapters, 0.81x the base's
  tokens/s against 0.88x here). Layers that read the same input tensor (q/k/v, gate/up of a
  block) share the gather and one matmul with their stacked A's.
* training (``train=True``): two dense matmuls over the concatenated factors of the used
  adapters and a row mask (P times the LoRA flops, but plain 2-D matmuls: a whole policy
  update of SmolLM2-135M with one adapter per micro-batch measured 4-5 % faster than with
  the batched path). The factors are the bank's own parameters, concatenated per call, so
  gradients flow to each adapter: P adapters train in one forward/backward.

Under a bf16 (or fp16) base both paths compute the delta in the fp32 factors' dtype and round it
once into the base's output, so the rollout's log-probs and the update's agree exactly
(:mod:`evolora.generation.mismatch`); the inference path adds it in place, so a bf16 routed decode
of SmolLM2-135M over 4 adapters runs at 0.89x the bf16 bare model (``benchmarks/throughput.py``).

Source: the multi-LoRA batching idea of S-LoRA (arXiv 2311.03285) and Punica (arXiv 2310.18547).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from evolora.generation.lora_stack import GatheredStack, RowPlan, adapter_row_mask, masked_delta_
from evolora.generation.types import RoutedBank
from evolora.model.device import model_device

LORA_COMPUTE_DTYPE: torch.dtype | None = None
"""Dtype of the inference path's LoRA matmuls: None computes in the factors' own dtype (fp32), then
adds the delta into the base's output in its dtype, in place. ``torch.bfloat16`` casts the cached
factors instead. On a CPU with AVX512-BF16 and no AMX, bf16 batched matmuls of LoRA's shapes are
slower than fp32 (``benchmarks/throughput.py --dtype bfloat16`` prints both), so None is the default."""

BASE = "__base__"
"""Adapter name that routes a row through the bare base model (PEFT's convention too)."""

SHARED_INPUT = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Sibling linear layers (leaf names under one parent module) fed the same input tensor in
Llama-style blocks. Only a speed hint: a sibling whose input is another tensor computes its own."""


def route_index(bank: RoutedBank, names: list[str]) -> torch.Tensor:
    """Row → slot index (−1 for ``"__base__"``). Shapes: returns (N,) long, on the bank's model's device.

    Raises:
        KeyError: an unknown adapter name.
    """
    index = []
    for name in names:
        if name == BASE:
            index.append(-1)
        elif name in bank.slots:
            index.append(bank.slots.index(name))
        else:
            raise KeyError(f"unknown adapter {name!r}; slots are {bank.slots}")
    return torch.tensor(index, dtype=torch.long, device=model_device(bank.model))


@contextmanager
def routed(bank: RoutedBank, names: list[str], *, train: bool = False) -> Iterator[None]:
    """Inside this context, a forward of ``bank.model`` routes row i through adapter ``names[i]``.

    Args:
        bank: the :class:`evolora.bank.local.AdapterBank`.
        names: one adapter slot (or ``"__base__"``) per batch row; generation must keep the
            batch order (``generate`` does).
        train: keep the graph to the adapters' parameters (for a batched policy update; the
            masked dense path). Otherwise (the gathered path) the used factors are stacked
            once, detached, on the first forward and reused by every forward in the context
            (a copy of the P used adapters, freed on exit).

    Raises:
        KeyError: an unknown adapter name.
    """
    route = route_index(bank, names)
    used = sorted(set(route.tolist()) - {-1})
    slots = [bank.slots[i] for i in used]
    scale = bank.alpha / bank.rank
    handles = []
    if used and train:
        mask = (adapter_row_mask(route, used, bank.rank) * scale).unsqueeze(1)  # (N, 1, P·r)
        for layer in bank.layers.values():
            handles.append(layer.base_layer.register_forward_hook(_masked_hook(layer, slots, mask)))
    elif used:  # (all rows on the bare base: no hooks at all)
        plan = RowPlan(route, used, bank.rank, scale)
        for members in _sibling_groups(bank.layers):
            group = _Group([bank.layers[name] for name in members], slots, plan)
            for j, name in enumerate(members):
                handles.append(bank.layers[name].base_layer.register_forward_hook(group.hook(j)))
    # Switch PEFT's own LoRA path off layer by layer. (PeftModel.disable_adapter() would also
    # set requires_grad=False on every adapter, which breaks the batched update.)
    previous = {name: layer._disable_adapters for name, layer in bank.layers.items()}
    try:
        for layer in bank.layers.values():
            layer._disable_adapters = True
        yield
    finally:
        for name, layer in bank.layers.items():
            layer._disable_adapters = previous[name]
        for handle in handles:
            handle.remove()


def _sibling_groups(layers: dict) -> list[list[str]]:
    """Layer names grouped by :data:`SHARED_INPUT` under one parent (bank order kept); others alone."""
    groups: dict[object, list[str]] = {}
    for name in layers:
        parent, _, leaf = name.rpartition(".")
        key = next(((parent, k) for k, family in enumerate(SHARED_INPUT) if leaf in family), name)
        groups.setdefault(key, []).append(name)
    return list(groups.values())


def _masked_hook(layer, slots: list[str], mask: torch.Tensor):
    """Training hook: the delta of :func:`evolora.generation.lora_stack.masked_delta_` over the used
    adapters' factors, concatenated with their graph on every call: A_cat (P·r, d_in), B_cat (d_out, P·r);
    ``mask``: (N, 1, P·r), s on the r columns of each row's adapter (all zero for a base row)."""

    def hook(module, inputs, output):
        x = inputs[0]
        if x.shape[0] != mask.shape[0]:
            raise RuntimeError(f"routed batch has {x.shape[0]} rows but {mask.shape[0]} adapter names were given")
        a_cat = torch.cat([layer.lora_A[s].weight for s in slots])  # (P·r, d_in)
        b_cat = torch.cat([layer.lora_B[s].weight for s in slots], dim=1)  # (d_out, P·r)
        return masked_delta_(output, x, a_cat, b_cat, mask)

    return hook


class _Group:
    """Inference hooks of sibling layers that share one input: the first computes, the others reuse.

    The G siblings' factors of the P used adapters are stacked once, detached, on first use, for the
    whole context (:class:`evolora.generation.lora_stack.GatheredStack`); its shrink serves the group
    with one batched matmul and sibling j expands rows [j·r, (j+1)·r) of hᵀ.
    """

    def __init__(self, layers: list, slots: list[str], plan: RowPlan):
        self.layers = layers
        self.slots = slots
        self.plan = plan
        self.stack: GatheredStack | None = None
        self.shared: tuple | None = None  # (input, hᵀ split per sibling, uses left) for the siblings to come

    def hook(self, j: int):
        plan, siblings = self.plan, len(self.layers)

        def hook(module, inputs, output):
            x = inputs[0]
            n = x.shape[0]
            if n != plan.rows:
                raise RuntimeError(f"routed batch has {n} rows but {plan.rows} adapter names were given")
            if self.stack is None:
                self.stack = GatheredStack(
                    [[layer.lora_A[s].weight for layer in self.layers] for s in self.slots],
                    [[layer.lora_B[s].weight for layer in self.layers] for s in self.slots],
                    plan,
                    LORA_COMPUTE_DTYPE,
                )
            d_out = output.shape[-1]
            tokens = x.numel() // (n * x.shape[-1])
            shared = self.shared
            if shared is not None and shared[0] is x:
                pieces = shared[1]
                self.shared = (x, pieces, shared[2] - 1) if shared[2] > 1 else None
            else:
                pieces = self.stack.shrink(x, tokens)  # sibling j: (P, r, n·T)
                self.shared = (x, pieces, siblings - 1) if siblings > 1 else None
            # In place: W x is fresh and not saved for backward (this path has no graph).
            target = output if output.is_contiguous() else output.contiguous()
            self.stack.expand_(target.view(n, tokens, d_out), pieces[j], j)
            return target

        return hook
