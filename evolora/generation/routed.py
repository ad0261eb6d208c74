"""Routed multi-adapter LoRA: every batch row through its own adapter, in one pass.

PEFT's mixed-adapter batches loop over adapters inside every LoRA layer (measured 0.5-0.7x
the base model's tokens/s with 4 adapters) and do not train. Here the base model runs with
adapters disabled and a forward hook on each adapted linear layer adds the routed delta

    x: (N, T, d_in),  A: (P, r, d_in),  B: (P, d_out, r),  route: (N,) ∈ {−1, 0..P−1}
    y = W x + s · B[route] (A[route] x)          (rows with route −1 get the bare base)

over the P adapters in use, by one of two paths:

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
    device = route.device
    used = sorted(set(route.tolist()) - {-1})
    slots = [bank.slots[i] for i in used]
    scale = bank.alpha / bank.rank
    handles = []
    if used and train:
        position = torch.full((len(bank.slots),), -1, dtype=torch.long, device=device)
        position[used] = torch.arange(len(used), device=device)
        rows = torch.where(route >= 0, position[route.clamp(min=0)], torch.zeros_like(route))
        mask = torch.zeros(len(names), len(used), bank.rank, device=device)
        mask[torch.arange(len(names), device=device), rows] = scale
        mask = (mask * (route >= 0).float().view(-1, 1, 1)).reshape(len(names), 1, len(used) * bank.rank)
        for layer in bank.layers.values():
            handles.append(layer.base_layer.register_forward_hook(_masked_hook(layer, slots, mask)))
    elif used:  # (all rows on the bare base: no hooks at all)
        plan = _Plan(route, used, bank.rank, scale)
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
    """Training hook: the delta with two dense matmuls over the used adapters' factors.

    A_cat: (P·r, d_in) and B_cat: (d_out, P·r), the factors concatenated with their graph
    on every call; ``mask``: (N, 1, P·r), s on the r columns of each row's adapter (all zero
    for a base row), so x·A_catᵀ keeps only the row's own adapter.
    """

    def hook(module, inputs, output):
        x = inputs[0]
        n = x.shape[0]
        if n != mask.shape[0]:
            raise RuntimeError(f"routed batch has {n} rows but {mask.shape[0]} adapter names were given")
        a_cat = torch.cat([layer.lora_A[s].weight for s in slots])  # (P·r, d_in)
        b_cat = torch.cat([layer.lora_B[s].weight for s in slots], dim=1)  # (d_out, P·r)
        pr = a_cat.shape[0]
        if x.dtype == a_cat.dtype == output.dtype and output.is_contiguous():
            # Fused and in place: W x is fresh and not saved for backward, so adding into it is safe.
            hidden = torch.matmul(x.reshape(-1, x.shape[-1]), a_cat.t()).view(n, -1, pr).mul_(mask)
            output.view(-1, output.shape[-1]).addmm_(hidden.view(-1, pr), b_cat.t())
            return output
        delta = _LoraDelta.apply(x.reshape(n, -1, x.shape[-1]), a_cat, b_cat, mask)  # (N, T, d_out)
        return output + delta.reshape(output.shape).to(output.dtype)

    return hook


class _LoraDelta(torch.autograd.Function):
    """delta = ((x A_catᵀ) ⊙ mask) B_catᵀ in the factors' dtype, for an input x of another dtype
    (a bf16 base): autograd through ``x.to(float32)`` would keep an fp32 copy of every adapted
    layer's input for A's gradient (q, k and v each their own: ~21 KB per token and layer of
    SmolLM2-135M, half a policy update's activations); here x is kept as given (one tensor for
    q, k, v) and cast again in backward. Same values: the cast is exact and the products are
    the ones autograd forms.

    Shapes: x (N, T, d_in), a_cat (P·r, d_in), b_cat (d_out, P·r), mask (N, 1, P·r); returns
    (N, T, d_out) in a_cat's dtype.
    """

    @staticmethod
    def forward(ctx, x, a_cat, b_cat, mask):
        hidden = torch.matmul(x.to(a_cat.dtype), a_cat.t()).mul_(mask)  # (N, T, P·r)
        ctx.save_for_backward(x, a_cat, b_cat, mask, hidden)
        return torch.matmul(hidden, b_cat.t())

    @staticmethod
    def backward(ctx, grad):
        x, a_cat, b_cat, mask, hidden = ctx.saved_tensors
        grad = grad.to(b_cat.dtype)
        flat = grad.reshape(-1, grad.shape[-1])  # (N·T, d_out)
        grad_b = flat.t() @ hidden.reshape(-1, hidden.shape[-1]) if ctx.needs_input_grad[2] else None
        grad_hidden = torch.matmul(grad, b_cat).mul_(mask)  # (N, T, P·r)
        flat_hidden = grad_hidden.reshape(-1, grad_hidden.shape[-1])
        grad_a = flat_hidden.t() @ x.reshape(-1, x.shape[-1]).to(a_cat.dtype) if ctx.needs_input_grad[1] else None
        grad_x = torch.matmul(grad_hidden, a_cat).to(x.dtype) if ctx.needs_input_grad[0] else None
        return grad_x, grad_a, grad_b, None


class _Plan:
    """What every layer of one inference ``routed`` call shares: which rows go to which adapter.

    The rows of used adapter p are ``gather[p·n : (p+1)·n]`` (n = the most rows any used
    adapter has; a shorter group is padded with copies of its first row, zeroed by ``keep``
    (P, 1, n, 1), so they add nothing). ``identity``: the rows already come grouped, in equal
    groups, so x is viewed, not gathered. ``scale`` = alpha / r, folded into the cached B.
    """

    def __init__(self, route: torch.Tensor, used: list[int], rank: int, scale: float):
        self.rows = route.shape[0]
        self.count = len(used)
        self.rank = rank
        self.scale = scale
        members = [torch.nonzero(route == slot).flatten() for slot in used]
        self.width = max(len(m) for m in members)
        self.gather = torch.cat([torch.cat([m, m[:1].expand(self.width - len(m))]) for m in members])
        keep = torch.stack([(torch.arange(self.width, device=route.device) < len(m)).float() for m in members])
        self.padded = bool((keep == 0).any())
        self.identity = not self.padded and torch.equal(self.gather, torch.arange(self.rows, device=route.device))
        self.keep = keep.view(self.count, 1, self.width, 1)


class _Group:
    """Inference hooks of sibling layers that share one input: the first computes, the others reuse.

    G siblings, P used adapters, cached (detached) for the whole context on first use:
    ``a``: (P, G·r, d_in), adapter p's A's of the G siblings stacked, so one batched matmul
    serves the group and sibling j takes rows [j·r, (j+1)·r) of hᵀ; ``bt[j]``: (P, r, d_out_j),
    s times sibling j's B's transposed, contiguous (the fast layout for a decoding step).
    """

    def __init__(self, layers: list, slots: list[str], plan: _Plan):
        self.layers = layers
        self.slots = slots
        self.plan = plan
        self.a: torch.Tensor | None = None
        self.bt: list[torch.Tensor | None] = [None] * len(layers)
        self.shared: tuple | None = None  # (input, hᵀ split per sibling, uses left) for the siblings to come

    @torch.no_grad()
    def _stack(self) -> None:
        a = torch.cat([layer.lora_A[s].weight for s in self.slots for layer in self.layers])
        dtype = LORA_COMPUTE_DTYPE or a.dtype
        self.a = a.view(len(self.slots), -1, a.shape[-1]).to(dtype)
        for j, layer in enumerate(self.layers):  # one allocation each, no temporaries
            bt = torch.stack([layer.lora_B[s].weight.t() for s in self.slots]).mul_(self.plan.scale)
            self.bt[j] = bt.to(dtype)

    def hook(self, j: int):
        plan, siblings = self.plan, len(self.layers)
        rows, count, width, gather, identity = plan.rows, plan.count, plan.width, plan.gather, plan.identity

        def hook(module, inputs, output):
            x = inputs[0]
            n = x.shape[0]
            if n != rows:
                raise RuntimeError(f"routed batch has {n} rows but {rows} adapter names were given")
            if self.a is None:
                self._stack()
            d_in, d_out = x.shape[-1], output.shape[-1]
            tokens = x.numel() // (n * d_in)
            shared = self.shared
            if shared is not None and shared[0] is x:
                pieces = shared[1]
                self.shared = (x, pieces, shared[2] - 1) if shared[2] > 1 else None
            else:
                x3 = x.reshape(n, tokens, d_in).to(self.a.dtype)
                if not identity:
                    x3 = x3.index_select(0, gather)
                h_t = torch.bmm(self.a, x3.reshape(count, -1, d_in).transpose(1, 2))  # (P, G·r, n·T)
                if plan.padded:
                    h_t.view(count, -1, width, tokens).mul_(plan.keep.to(h_t.dtype))
                pieces = h_t.split(plan.rank, dim=1)  # sibling j: (P, r, n·T)
                self.shared = (x, pieces, siblings - 1) if siblings > 1 else None
            h = pieces[j].transpose(1, 2)  # (P, n·T, r)
            # In place: W x is fresh and not saved for backward (this path has no graph).
            target = output if output.is_contiguous() else output.contiguous()
            _add_delta(target.view(n, tokens, d_out), h, self.bt[j], plan)
            return target

        return hook


def _add_delta(out: torch.Tensor, h: torch.Tensor, bt: torch.Tensor, plan: _Plan) -> None:
    """out (N, T, d_out) += the routed delta h · bt: h (P, n·T, r), bt (P, r, d_out), in h's dtype,
    rounded once to out's. Rows come from :class:`_Plan` (a view when grouped, else index_add_)."""
    count, d_out = plan.count, out.shape[-1]
    if plan.identity and out.dtype == bt.dtype:
        out.view(count, -1, d_out).baddbmm_(h, bt)
    elif plan.identity:
        out.view(count, -1, d_out).add_(torch.bmm(h, bt))
    else:
        delta = torch.bmm(h, bt).view(-1, out.shape[1], d_out)  # (P·n, T, d_out)
        out.index_add_(0, plan.gather, delta.to(out.dtype))
