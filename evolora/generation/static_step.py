"""One fixed-shape decode step of a Llama-family model with the routed LoRA delta inside it.

The step reads and writes only tensors at fixed addresses (:class:`StaticWeights` and the
buffers of :mod:`evolora.generation.graph`), so it can be captured once in a CUDA graph and
replayed: no ``.item()``, no host sync, no Python value that changes from step to step (the
write column, positions and step count are tensors).

Per decoder layer, the sibling linear layers that read one input (q/k/v; gate/up) run as one
fused GEMM over their concatenated base weights, and each sibling group's LoRA delta is two GEMMs
over the factors of every bank slot stacked at fixed addresses:

    x: (R, d_in), A: (d_in, P·G·r), B: (P·G·r, d_out_group), onehot: (R, P)
    h = x A ⊙ onehot (per adapter's G·r columns);   y = W x + h B

``B`` is block-structured (sibling j's factors in its own output columns, zero elsewhere) and
``alpha / r`` is folded into it (:class:`evolora.generation.lora_stack.DenseStack`, the one stacked-LoRA
layer, where a fused kernel plugs in). A row meets only its own adapter's columns (a ``"__base__"`` row
has an all-zero onehot: no delta). This dense masked form does P times the LoRA flops of a grouped
(SGMV) kernel but keeps every shape fixed without a custom kernel; at decode the step's cost is
reading weights, and the stacked factors are read once per step either way. Like the eager routed
path (:mod:`evolora.generation.routed`), the delta is computed in the factors' dtype (fp32) and
rounded once into the base output.

Supported (:data:`evolora.generation.registry.SUPPORTED`): ``llama``, ``mistral``, ``qwen2`` (q/k/v biases),
``qwen3`` (q/k norms) decoder layers.
Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-3 (rollouts); Punica (arXiv 2310.18547) for the
multi-LoRA batching.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from evolora.generation.kernels import Backend, kernel_backend
from evolora.generation.kernels.attention_torch import attend_torch, row_bounds
from evolora.generation.kernels.attention_torch import attention_bias as _additive_mask
from evolora.generation.lora_stack import DenseStack, onehot_slots
from evolora.generation.registry import check_graph

if TYPE_CHECKING:
    from evolora.generation.types import RoutedBank

SIBLINGS = (
    ("self_attn", ("q_proj", "k_proj", "v_proj")),
    ("self_attn", ("o_proj",)),
    ("mlp", ("gate_proj", "up_proj")),
    ("mlp", ("down_proj",)),
)
"""Linear layers of one decoder layer, grouped by the input they read (one fused GEMM each)."""

SKINNY_ROWS = 16
"""On the CPU, inputs of at most this many rows take (W xᵀ)ᵀ for d_out >= d_in (see
:func:`evolora.generation.decode.skinny_linears` for the measurement)."""


def _base_linear(module) -> torch.nn.Linear:
    return module.base_layer if hasattr(module, "base_layer") else module


class _Group:
    """One sibling group of one layer: fused base weight (d_out, d_in) and bias, the output split
    sizes, and ``lora``, every slot's factors stacked at fixed addresses
    (:class:`evolora.generation.lora_stack.DenseStack`; None when no sibling is adapted)."""

    def __init__(self, modules: list, names: list[str], bank: RoutedBank, slots: int, backend: Backend) -> None:
        linears = [_base_linear(m) for m in modules]
        self.weight = (
            torch.cat([lin.weight.detach() for lin in linears]) if len(linears) > 1 else linears[0].weight.detach()
        )
        biases = [lin.bias for lin in linears]
        self.bias = (
            None
            if all(b is None for b in biases)
            else torch.cat(
                [
                    (
                        b.detach()
                        if b is not None
                        else torch.zeros(lin.out_features, dtype=lin.weight.dtype, device=lin.weight.device)
                    )
                    for b, lin in zip(biases, linears)
                ]
            )
        )
        self.sizes = [lin.out_features for lin in linears]
        self.adapted = [(j, name) for j, name in enumerate(names) if name in bank.layers]
        self.lora: DenseStack | None = None
        if self.adapted:
            factor = bank.layers[self.adapted[0][1]].lora_A[bank.slots[0]].weight
            owner = {j: k for k, (j, _) in enumerate(self.adapted)}  # sibling j -> adapted index k
            columns = torch.cat(
                [
                    torch.full((size,), owner.get(j, 0), dtype=torch.int32, device="cpu")
                    for j, size in enumerate(self.sizes)
                ]
            )
            self.lora = DenseStack(
                slots,
                len(self.adapted),
                bank.rank,
                self.weight.shape[1],
                self.weight.shape[0],
                dtype=factor.dtype,
                device=factor.device,
                columns=columns,
                backend=backend,
            )

    def reorder(self, order: torch.Tensor) -> None:
        """Output column c becomes the siblings' concatenated column ``order[c]`` (a column may repeat),
        in the base weight, the bias and (at each :meth:`refresh`) the stacked B. Before any refresh."""
        order = order.to(self.weight.device)
        self.weight, self.bias = self.weight[order], None if self.bias is None else self.bias[order]
        if self.lora is not None:
            self.lora.reorder(order)

    @torch.no_grad()
    def refresh(self, bank: RoutedBank, slot_indices: list[int]) -> None:
        """Copy the factors of bank slots ``slot_indices`` into the stack in place."""
        if self.lora is None:
            return
        rank, g, scale = bank.rank, len(self.adapted), bank.alpha / bank.rank
        offsets = [sum(self.sizes[:j]) for j in range(len(self.sizes))]
        for p in slot_indices:
            slot = bank.slots[p]
            block = self.lora.b.new_zeros(g * rank, sum(self.sizes))  # (G·r, d_out) in the siblings' order
            for k, (j, name) in enumerate(self.adapted):
                block[k * rank : (k + 1) * rank, offsets[j] : offsets[j] + self.sizes[j]] = (
                    bank.layers[name].lora_B[slot].weight.t() * scale
                )
            self.lora.write_(p, [bank.layers[name].lora_A[slot].weight for _, name in self.adapted], block)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x (R, d_in) Wᵀ (+ bias); few-row fp32 products on the CPU as (W xᵀ)ᵀ."""
    if (
        x.device.type == "cpu"
        and x.shape[0] <= SKINNY_ROWS
        and weight.shape[0] >= weight.shape[1]
        and x.dtype == weight.dtype
    ):
        y = torch.mm(weight, x.t()).t().contiguous()
        return y if bias is None else y.add_(bias)
    return F.linear(x, weight, bias)


def qkv_order(heads: int, kv_heads: int, head_dim: int, flipped: bool) -> torch.Tensor:
    """Output columns of the fused q/k/v GEMM, as indices into its siblings' concatenated columns.

    Layout (S, H_kv, G + 2, D): per key/value head j, its k head, its v head, then the G = H_q / H_kv
    query heads that attend it; S = 2 when ``flipped`` (the second copy holds each head with its two
    halves swapped, what ``rotate_half`` reads), else 1. The q heads of a row are then a
    (H_kv, G, D) view whose batch (row, j) strides merge: one ``bmm`` reads them without a copy.
    """
    group, half = heads // kv_heads, head_dim // 2
    cpu = torch.device("cpu")  # index arithmetic, moved with the weights it orders
    head = torch.empty(kv_heads, group + 2, dtype=torch.long, device=cpu)
    head[:, 0] = heads + torch.arange(kv_heads, device=cpu)  # k
    head[:, 1] = heads + kv_heads + torch.arange(kv_heads, device=cpu)  # v
    head[:, 2:] = torch.arange(heads, device=cpu).view(kv_heads, group)  # q
    within = torch.arange(head_dim, device=cpu)
    copies = [within, (within + half) % head_dim] if flipped else [within]
    return torch.stack([head[..., None] * head_dim + c for c in copies]).flatten()


class StaticWeights:
    """The tensors :func:`decode_step` reads, gathered once from an :class:`evolora.bank.local.AdapterBank`.

    Base weights are the bank's own tensors (fused copies for q/k/v and gate/up); the LoRA
    factors of every slot are stacked per sibling group (:meth:`refresh` updates them in place).

    ``swapped_copy``: the q/k/v GEMM also writes each head with its halves swapped (:func:`qkv_order`;
    not for layers with q/k norms, nor with the fused rotary); None: on CUDA only.

    ``kernels``: what computes the routed LoRA and the rotary (:data:`evolora.generation.kernels.Backend`);
    None: :func:`~evolora.generation.kernels.kernel_backend` of the model's device, chosen here once.
    With ``"triton"`` every sibling group's delta is the routed shrink/expand pair, and, for a
    power-of-two head size, the rotary of q/k with the k/v cache write is one kernel per layer
    (``fused_rotary``); with ``fused_mlp`` (and a SiLU-gated MLP) silu(gate) · up is one kernel, and
    with ``flash_decode`` the attention is one kernel reading each row's filled columns only
    (:mod:`evolora.generation.kernels.attention_triton`). Both flags are ignored on the torch backend.

    Raises:
        ValueError: the model's ``model_type`` is not one the step computes
            (:data:`evolora.generation.registry.SUPPORTED`, :func:`~evolora.generation.registry.check_graph`).
    """

    def __init__(
        self,
        bank: RoutedBank,
        *,
        swapped_copy: bool | None = None,
        kernels: Backend | None = None,
        fused_mlp: bool = True,
        flash_decode: bool = True,
    ) -> None:
        base = bank.model.get_base_model() if hasattr(bank.model, "get_base_model") else bank.model
        config = base.config
        check_graph(model_type=config.model_type)
        self.bank, self.base = bank, base
        self.kernels: Backend = kernel_backend(base.lm_head.weight.device) if kernels is None else kernels
        self.embed = base.model.embed_tokens
        self.norm = base.model.norm
        self.rotary = base.model.rotary_emb
        self.head = base.lm_head.weight.detach()
        self.slots = len(bank.slots)
        self.layers = []
        for i, layer in enumerate(base.model.layers):
            groups = []
            for parent, leaves in SIBLINGS:
                owner = getattr(layer, parent)
                names = [f"model.layers.{i}.{parent}.{leaf}" for leaf in leaves]
                groups.append(_Group([getattr(owner, leaf) for leaf in leaves], names, bank, self.slots, self.kernels))
            attn = layer.self_attn
            self.layers.append((layer, attn, groups))
        attn = base.model.layers[0].self_attn
        self.head_dim = attn.head_dim
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        if self.heads % self.kv_heads:
            raise ValueError(f"{self.heads} attention heads do not group over {self.kv_heads} key/value heads")
        self.scaling = attn.scaling
        # the q/k/v GEMM also writes the halves-swapped heads (one kernel fewer per layer, the q/k/v
        # weights read twice): on CUDA, where the step is bound by kernels; the CPU's by its GEMMs
        self.fused_rotary = self.kernels == "triton" and not self.head_dim & (self.head_dim - 1)
        self.flipped = (
            (self.head.device.type == "cuda" if swapped_copy is None else swapped_copy)
            and not hasattr(attn, "q_norm")
            and not self.fused_rotary
        )
        order = qkv_order(self.heads, self.kv_heads, self.head_dim, self.flipped)
        for _, _, groups in self.layers:
            groups[0].reorder(order)
        self.fold_scaling = math.frexp(self.scaling)[0] == 0.5  # a power of two: folded exactly into q
        self.rotary_kernel = None
        if self.fused_rotary:
            from evolora.generation.kernels.rotary_triton import rotary_kv_write

            self.rotary_kernel = rotary_kv_write
        self._fuse(config, fused_mlp, flash_decode)
        self.dtype = self.head.dtype
        self.device = self.head.device
        self.vocab = self.head.shape[0]
        self.refresh(list(range(self.slots)))

    def _fuse(self, config, fused_mlp: bool, flash_decode: bool) -> None:
        """Set ``fused_mlp``, ``flash_decode`` and their kernels (None where the torch path runs)."""
        triton = self.kernels == "triton"
        self.fused_mlp = triton and fused_mlp and getattr(config, "hidden_act", None) in ("silu", "swish")
        self.flash_decode = triton and flash_decode
        self.mlp_kernel = self.attention_kernel = None
        if self.fused_mlp:
            from evolora.generation.kernels.silu_mul_triton import silu_mul

            self.mlp_kernel = silu_mul
        if self.flash_decode:
            from evolora.generation.kernels.attention_triton import decode_attention

            self.attention_kernel = decode_attention

    def refresh(self, slot_indices: list[int]) -> None:
        """Copy bank slots ``slot_indices``' current factors into the stacked buffers, in place."""
        for _, _, groups in self.layers:
            for group in groups:
                group.refresh(self.bank, slot_indices)


def _project(x: torch.Tensor, group: _Group, onehot: torch.Tensor, into: torch.Tensor | None = None) -> torch.Tensor:
    """The group's fused output (R, d_out): base GEMM plus the masked two-GEMM LoRA delta.

    With ``into`` (R, d_out), the output is added to it in place (the residual stream): the base
    GEMM accumulates onto it (``addmm_``, one kernel for the product and the residual add), then
    the delta; returns ``into``."""
    if into is None:
        y = _linear(x, group.weight, group.bias)
    elif (
        x.device.type == "cpu"
        and x.shape[0] <= SKINNY_ROWS
        and x.dtype == group.weight.dtype
        and group.weight.shape[0] >= group.weight.shape[1]
    ):
        y = into.add_(torch.mm(group.weight, x.t()).t())
    else:
        y = into.addmm_(x, group.weight.t())
    if into is not None and group.bias is not None:
        y.add_(group.bias)
    if group.lora is not None:
        group.lora.add_(y, x, onehot)  # the masked two-GEMM delta (evolora.generation.lora_stack)
    return y


def step_tables(w: StaticWeights, hidden: torch.Tensor, position: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotary tables every layer of one step shares: ``cos``, ``sin`` (R, H_kv, G + 2, D), in the
    fused GEMM's head layout (:func:`qkv_order`: k, v, then G q heads per key/value head).

    Rotating the heads as ``x·cos + swap_halves(x)·sin`` gives HF's ``x·cos + rotate_half(x)·sin``
    bitwise on the q and k heads (``sin``'s first half is negated, so ``−x₂·s`` becomes ``x₂·(−s)``)
    and leaves the v heads unchanged (``cos`` 1, ``sin`` 0). When the attention scaling is a power
    of two (head dim 64: 1/8) it is folded into the q heads' tables, exactly: (q·s)·kᵀ = s·(q·kᵀ)
    bitwise; otherwise :func:`decode_step` applies it in the scores GEMM.
    """
    cos, sin = w.rotary(hidden, position[:, None])  # (R, 1, D)
    half = w.head_dim // 2
    sin = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
    rows, hk, group = hidden.shape[0], w.kv_heads, w.heads // w.kv_heads
    scale = w.scaling if w.fold_scaling else 1.0
    cos_all = torch.cat([cos, torch.ones_like(cos), (cos * scale).expand(rows, group, -1)], dim=1)
    sin_all = torch.cat([sin, torch.zeros_like(sin), (sin * scale).expand(rows, group, -1)], dim=1)
    return cos_all[:, None].expand(rows, hk, group + 2, -1), sin_all[:, None].expand(rows, hk, group + 2, -1)


def attention_bias(w: StaticWeights, valid: torch.Tensor, window: int) -> torch.Tensor:
    """The additive mask of one step, (R·H_kv, 1, W) in the model's dtype: 0 where ``valid``, −inf elsewhere."""
    return _additive_mask(valid[:, :window], w.kv_heads, w.dtype)


def decode_step(
    w: StaticWeights,
    tokens: torch.Tensor,
    position: torch.Tensor,
    column: torch.Tensor,
    kv: torch.Tensor,
    valid: torch.Tensor,
    onehot: torch.Tensor,
    window: int,
) -> torch.Tensor:
    """Feed one token per row; returns (R, V) logits of the next token.

    Shapes: ``tokens`` (R,) long; ``position`` (R,) long RoPE positions; ``column`` (1,) long, the
    cache column written (the same for every row: left-padded batches); ``kv`` (L, 2, R, H_kv, C, D)
    keys ([:, 0]) and values ([:, 1]), written at ``column``; ``valid`` (R, C) bool, cache slots each
    row attends (``column`` is set here); ``onehot`` (R, P) float, row → adapter; ``window``: columns
    [0, window) attended (a Python int, fixed per captured step, > the column).

    Per layer: RMSNorm as one ``F.rms_norm`` (one fused kernel on CUDA); the q/k/v GEMM writes the
    heads in :func:`qkv_order`'s layout, with a halves-swapped copy, so the rotary of q, k (and the
    identity on v) is three element-wise kernels over all heads with tables shared by every layer
    (:func:`step_tables`); one ``index_copy_`` of k|v into the cache; the q heads read in place (with
    ``w.kernels == "triton"``: the routed LoRA as two kernels per sibling group and the rotary with the
    k/v write as one, :func:`_rotate`); the scores as one ``baddbmm``
    onto the additive mask (:func:`attention_bias`), one softmax (accumulated in fp32), one ``bmm``
    (``w.flash_decode``: one kernel between each row's bounds, :func:`_attend`); silu(gate) · up as two
    element-wise kernels (``w.fused_mlp``: one); the o and down projections accumulate onto the
    residual stream in place (:func:`_project`).
    In fp32 this computes HF's layer up to summation order (the fused GEMMs; residual + W x + delta
    rather than residual + (W x + delta)).
    """
    valid.index_fill_(1, column, True)
    seen = valid[:, :window]
    mask = row_bounds(seen) if w.flash_decode else attention_bias(w, valid, window)  # per step, not per layer
    hidden = w.embed(tokens)  # (R, d)
    tables = _raw_tables(w, hidden, position) if w.fused_rotary else step_tables(w, hidden, position)
    route = onehot if w.kernels == "torch" else onehot_slots(onehot)  # the Triton kernels read slots
    alpha = 1.0 if w.fold_scaling else w.scaling
    for i, (layer, attn, (qkv, out, gate_up, down)) in enumerate(w.layers):
        x = _norm(hidden, layer.input_layernorm)
        q = _rotate(w, _project(x, qkv, route), attn, tables, kv[i], column)  # (R·H_kv, G, D)
        hidden = _project(_attend(w, q, kv[i, :, :, :, :window], seen, mask, alpha), out, route, into=hidden)
        hidden = _mlp(w, layer, hidden, gate_up, down, route)
    return _linear(_norm(hidden, w.norm), w.head, None)


def _mlp(w: StaticWeights, layer, hidden: torch.Tensor, gate_up, down, route) -> torch.Tensor:
    """A decoder block's MLP half, added into ``hidden`` (M, d) in place: norm, the gate/up projection
    (M, 2·I: gate, then up), silu(gate)·up (one kernel where ``w.fused_mlp``), the down projection.
    Shared by the decode step and the static prefill."""
    x = _norm(hidden, layer.post_attention_layernorm)
    y = _project(x, gate_up, route)
    if w.fused_mlp:
        y = w.mlp_kernel(y)
    else:
        g, u = y.split(gate_up.sizes, dim=-1)
        y = layer.mlp.act_fn(g) * u
    return _project(y, down, route, into=hidden)


def _raw_tables(
    w: StaticWeights, hidden: torch.Tensor, position: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """HF's ``cos``, ``sin`` (R, D) at each row's position and the q heads' folded scale: the fused
    rotary kernel's tables (it negates ``sin``'s first half and scales the q heads itself)."""
    cos, sin = w.rotary(hidden, position[:, None])  # (R, 1, D)
    return cos[:, 0], sin[:, 0], w.scaling if w.fold_scaling else 1.0


def _rotate(
    w: StaticWeights, y: torch.Tensor, attn, tables: tuple, kv: torch.Tensor, column: torch.Tensor
) -> torch.Tensor:
    """Rotary of the fused q/k/v output ``y`` (R, d_out) and its k|v written into one layer's ``kv``
    (2, R, H_kv, C, D) at ``column``; returns the q heads (R·H_kv, G, D).

    Three layouts: the fused kernel (``w.fused_rotary``: one launch, reading y once); the halves-swapped
    copy (``w.flipped``: two element-wise products and a sum); or the swap as a flipped view."""
    rows, d, hk = y.shape[0], w.head_dim, w.kv_heads
    group = w.heads // hk
    if w.flipped:  # (R, 2, H_kv, G + 2, D): the heads, then the heads with swapped halves
        y = y.view(rows, 2, hk, group + 2, d)
        y = y[:, 0] * tables[0] + y[:, 1] * tables[1]
    else:
        y = y.view(rows, hk, group + 2, d)
        if hasattr(attn, "q_norm"):
            y = torch.cat([attn.k_norm(y[:, :, :1]), y[:, :, 1:2], attn.q_norm(y[:, :, 2:])], dim=2)
        if w.fused_rotary:
            return w.rotary_kernel(y, tables[0], tables[1], kv, column, tables[2]).flatten(0, 1)
        swapped = y.view(rows, hk, group + 2, 2, d // 2).flip(3).view(rows, hk, group + 2, d)
        y = y * tables[0] + swapped * tables[1]
    kv.index_copy_(3, column, y[:, :, :2].permute(2, 0, 1, 3).unsqueeze(3))  # k|v (2, R, H_kv, 1, D)
    return y[:, :, 2:].flatten(0, 1)  # a view


def _attend(
    w: StaticWeights, q: torch.Tensor, kv: torch.Tensor, valid: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """One layer's attention context (R, H_q·D) of the q heads (R·H_kv, G, D) over ``kv`` (2, R, H_kv, W, D),
    the window's columns: the torch path (``mask`` the additive mask, :func:`attention_bias`) or the
    flash-decode kernel (``mask`` the rows' bounds, :func:`~evolora.generation.kernels.attention_torch.row_bounds`
    of ``valid`` (R, W))."""
    rows = valid.shape[0]
    if w.flash_decode:
        q = q.view(rows, w.kv_heads, w.heads // w.kv_heads, w.head_dim)
        context = w.attention_kernel(q, kv[0], kv[1], valid, mask, scale)
    else:
        context = attend_torch(q, kv[0].flatten(0, 1), kv[1].flatten(0, 1), mask, scale)  # (R·H_kv, W, D) views
    return context.view(rows, w.heads * w.head_dim)


def _norm(x: torch.Tensor, module) -> torch.Tensor:
    """HF's RMSNorm as ``F.rms_norm``: in fp32 the same ops in the same order (bitwise equal); under a
    bf16 base the weight is applied before the one rounding (HF rounds, then multiplies in bf16)."""
    return F.rms_norm(x, module.weight.shape, module.weight, module.variance_epsilon)
