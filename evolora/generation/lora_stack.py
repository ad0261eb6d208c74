"""The stacked-LoRA layer: the routed delta of one group of sibling projections, in one place.

For a group of G sibling projections that read one input (q/k/v: G = 3; gate/up: 2; o or down: 1),
P adapters of rank r and s = alpha / r:

    x: (M, d_in) rows,  slots: (M,) ∈ {−1, 0..P−1} (−1: the bare base, no delta)
    out: (M, D) the group's base output W x (D = Σ_j d_j), and in place
    out[m, columns of j] += s · B_j[slots[m]] (A_j[slots[m]] x[m])

computed in the factors' dtype (fp32) and rounded once into ``out``'s dtype, so a bf16 base's
rollouts and updates agree (:mod:`evolora.generation.mismatch`). Each caller holds the stacked
factors in the layout its loop wants; each layout is one class (or function) here whose one method
adds the delta, given x, the stacked A/B and the rows' slots:

================  ==================================================  ===============================
:class:`DenseStack`     every slot at fixed addresses: a (d_in, P·G·r),     the static step
                        b (P·G·r, D) block-structured; rows as a (M, P)     (:mod:`evolora.generation.
                        one-hot (:func:`slot_onehot`); two dense GEMMs      static_step`, CUDA graphs)
:class:`GatheredStack`  the used slots: a (P, G·r, d_in), bt_j (P, r, d_j);  the eager routed decode
                        rows gathered by slot (:class:`RowPlan`), two        (:mod:`evolora.generation.
                        batched matmuls                                      routed`, no gradient)
:func:`masked_delta_`   the used slots' factors concatenated with their     the update's forward
                        graph, a row mask; two dense 2-D matmuls            (gradients to each adapter)
================  ==================================================  ===============================

A fused kernel (Punica's shrink/expand, :mod:`evolora.generation.kernels`) replaces one of these
methods with the same arguments and result; the callers do not change. :class:`DenseStack` does so on
CUDA with triton (its ``backend``, chosen once when it is built).
Source: S-LoRA (arXiv 2311.03285) and Punica (arXiv 2310.18547) for the multi-LoRA batching.
"""

from __future__ import annotations

import torch

from evolora.generation.kernels import Backend, kernel_backend


def slot_onehot(slots: torch.Tensor, count: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(M, P) ``dtype``: 1 at each row's slot (``slots`` (M,) integers), an all-zero row for −1."""
    return (slots[:, None] == torch.arange(count, device=slots.device)).to(dtype)


class DenseStack:
    """Every slot's factors of one group at fixed addresses: the static step's layout.

    ``a``: (d_in, P·W), W = G'·r (G' adapted siblings): slot p's columns [p·W, (p+1)·W), sibling k's
    A_kᵀ in columns [k·r, (k+1)·r) of them. ``b``: (P·W, D): slot p's rows, sibling k's s·B_kᵀ in its
    own output columns and zero elsewhere (optionally in another column order: :meth:`reorder`).
    Written in place (:meth:`write_`), so a captured step reads new factors without recapture. This
    dense masked form does P times the LoRA flops of a grouped kernel but keeps every shape fixed.

    ``backend`` (:func:`evolora.generation.kernels.kernel_backend`, chosen once when the stack is built):
    ``"torch"`` adds the delta with the two dense GEMMs above (the reference, the CPU path);
    ``"triton"`` with the two routed kernels of :mod:`evolora.generation.kernels.lora_triton`, which read
    each row's own slot only, from a second copy of the factors in their layout, ``packed_a``
    (P, W, d_in) and ``packed_b`` (P, r, D) (``packed_b[p, k, c]`` = b's row p·W + j(c)·r + k at column
    c, j(c) the adapted sibling that owns column c), written by the same :meth:`write_`.

    Args:
        slots: P; adapted: G'; rank: r; d_in, d_out: the group's input and output widths;
        dtype, device: the factors' (the delta is computed in ``dtype``);
        columns: (d_out,) integers, the adapted sibling k in [0, G') that owns each output column (any
            value for a column of a sibling without LoRA; its factors are zero); read only by the
            Triton backend, which needs it when G' > 1.
        backend: None: :func:`~evolora.generation.kernels.kernel_backend` of ``device``.

    Raises:
        ValueError: an unknown backend, or the Triton backend without ``columns`` for G' > 1.
    """

    def __init__(
        self,
        slots: int,
        adapted: int,
        rank: int,
        d_in: int,
        d_out: int,
        *,
        dtype: torch.dtype,
        device: torch.device,
        columns: torch.Tensor | None = None,
        backend: Backend | None = None,
    ) -> None:
        self.rank, self.width = rank, adapted * rank
        self.a = torch.zeros(d_in, slots * self.width, dtype=dtype, device=device)
        self.b = torch.zeros(slots * self.width, d_out, dtype=dtype, device=device)
        self.order: torch.Tensor | None = None
        self.backend: Backend = kernel_backend(device) if backend is None else backend
        if self.backend not in ("torch", "triton"):
            raise ValueError(f"backend must be 'torch' or 'triton', got {self.backend!r}")
        self.add_ = self.add_dense_ if self.backend == "torch" else self.add_routed_
        if columns is None and adapted == 1:
            columns = torch.zeros(d_out, dtype=torch.int32, device=device)
        if columns is None and self.backend == "triton":
            raise ValueError(f"the Triton backend needs each of the {d_out} output columns' sibling (columns)")
        self.columns = None if columns is None else columns.to(device=device, dtype=torch.int32)
        if self.backend == "triton":
            self.packed_a = torch.zeros(slots, self.width, d_in, dtype=dtype, device=device)
            self.packed_b = torch.zeros(slots, rank, d_out, dtype=dtype, device=device)

    def reorder(self, order: torch.Tensor) -> None:
        """Output column c becomes the siblings' concatenated column ``order[c]`` (a column may repeat)
        at every later :meth:`write_`. Before any write."""
        self.order = order
        self.b = self.b.new_zeros(self.b.shape[0], len(order))
        if self.columns is not None:
            self.columns = self.columns[order.to(self.columns.device)]
        if self.backend == "triton":
            self.packed_b = self.packed_b.new_zeros(self.packed_b.shape[0], self.rank, len(order))

    @torch.no_grad()
    def write_(self, slot: int, a_factors: list[torch.Tensor], b_block: torch.Tensor) -> None:
        """Copy slot ``slot``'s factors in place: ``a_factors`` the G' A's (r, d_in) in sibling order,
        ``b_block`` (W, D) s·Bᵀ block-structured in the siblings' concatenated column order."""
        rows = slice(slot * self.width, (slot + 1) * self.width)
        for k, a in enumerate(a_factors):
            self.a[:, rows][:, k * self.rank : (k + 1) * self.rank].copy_(a.t())
        block = b_block if self.order is None else b_block[:, self.order]
        self.b[rows].copy_(block)
        if self.backend == "triton":
            self.packed_a[slot].copy_(self.a[:, rows].t())
            owner = self.columns.long().view(1, 1, -1).expand(1, self.rank, -1)  # (1, r, D): j(c)
            self.packed_b[slot].copy_(block.view(-1, self.rank, block.shape[1]).gather(0, owner)[0])

    def add_dense_(self, out: torch.Tensor, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``out`` (M, D) += the routed delta of ``x`` (M, d_in) by two dense GEMMs. Returns ``out``.

        ``rows``: the rows' slots, (M,) integers (−1: base), or their (M, P) float one-hot
        (:func:`slot_onehot`), which a step computes once for all its layers (and a captured step
        keeps at a fixed address)."""
        onehot = rows if rows.is_floating_point() else slot_onehot(rows, self.a.shape[1] // self.width, self.a.dtype)
        h = torch.mm(x.to(self.a.dtype), self.a)  # (M, P·W)
        h.view(x.shape[0], onehot.shape[1], -1).mul_(onehot[:, :, None])
        if out.dtype == h.dtype:
            return out.addmm_(h, self.b)
        return out.add_(torch.mm(h, self.b))  # a bf16 base: the fp32 delta added in one kernel, rounded once

    def add_routed_(self, out: torch.Tensor, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``out`` (M, D) += the routed delta of ``x`` (M, d_in) by the Triton shrink and expand (two
        launches; a row reads only its own slot's factors). Returns ``out``.

        ``rows``: the rows' slots, (M,) integers (−1: base); a (M, P) one-hot is turned into slots
        first (:func:`onehot_slots`: three more kernels, so a step passes the slots)."""
        from evolora.generation.kernels.lora_triton import routed_lora_triton

        slots = onehot_slots(rows) if rows.is_floating_point() else rows
        return routed_lora_triton(x, self.packed_a, self.packed_b, slots, self.columns, out)

    add_ = add_dense_  # replaced per instance by the backend's method in __init__


def onehot_slots(onehot: torch.Tensor) -> torch.Tensor:
    """(M,) long slots of a (M, P) one-hot (:func:`slot_onehot`'s inverse): −1 for an all-zero row."""
    return torch.where(onehot.amax(dim=1) > 0, onehot.argmax(dim=1), -1)


DENSE_ROWS = 16
"""Routed inputs of at most this many rows × tokens (decoding steps) take :class:`GatheredStack`'s dense
layout: one matmul over all P used adapters' A's and a row mask instead of a gather and batched
matmuls (P times the LoRA flops). SmolLM2's groups over 4 adapters, fp32, 1 thread, dense over
gathered time (``benchmarks/lora_layout.py``, the layouts interleaved in one process; Intel Xeon with
AMX, no other jobs, 2026-12-06): q/k/v 0.53x at 8 rows, 0.74x at 16, 0.87x at 32, 1.06x at 64; gate/up
0.61x, 0.84x, 1.05x, 1.14x; o 0.58x, 0.79x, 1.10x, 1.02x."""


def adapter_row_mask(slots: torch.Tensor, used: list[int], rank: int) -> torch.Tensor:
    """1 on the r columns of each row's adapter among the used adapters' concatenated factors.

    Args:
        slots: (N,) long, each row's bank slot (−1: the bare base, a row of zeros).
        used: the sorted slots of ``slots`` besides −1 (P of them); rank: r.

    Shapes: returns (N, P·r) float32 on ``slots``' device, column block p for ``used[p]``.
    """
    mask = torch.zeros(slots.shape[0], len(used), rank, device=slots.device)
    for p, slot in enumerate(used):
        mask[slots == slot, p] = 1.0
    return mask.view(slots.shape[0], len(used) * rank)


class RowPlan:
    """Which rows go to which adapter, shared by every layer of one routed forward.

    The rows of used adapter p are ``gather[p·n : (p+1)·n]`` (n = the most rows any used adapter
    has; a shorter group is padded with copies of its first row, zeroed by ``keep`` (P, 1, n, 1), so
    they add nothing). ``identity``: the rows already come grouped, in equal groups, so x is viewed,
    not gathered. ``scale`` = alpha / r, folded into the stacked B.

    Args:
        slots: (N,) long, each row's bank slot (−1: base); used: the sorted slots of ``slots`` besides −1.
    """

    def __init__(self, slots: torch.Tensor, used: list[int], rank: int, scale: float):
        self.rows = slots.shape[0]
        self.count = len(used)
        self.rank = rank
        self.scale = scale
        members = [torch.nonzero(slots == slot).flatten() for slot in used]
        self.width = max(len(m) for m in members)
        self.gather = torch.cat([torch.cat([m, m[:1].expand(self.width - len(m))]) for m in members])
        keep = torch.stack([(torch.arange(self.width, device=slots.device) < len(m)).float() for m in members])
        self.padded = bool((keep == 0).any())
        self.identity = not self.padded and torch.equal(self.gather, torch.arange(self.rows, device=slots.device))
        self.keep = keep.view(self.count, 1, self.width, 1)
        self.row_mask = adapter_row_mask(slots, used, rank)  # the dense layout's: 1 on each row's adapter


class GatheredStack:
    """The used adapters' factors of one group for one routed forward without gradient: the eager
    decode's layout. ``a``: (P, G·r, d_in), adapter p's A's of the G siblings stacked, so one batched
    matmul serves the group; ``bt[j]``: (P, r, d_j), s·B_jᵀ of sibling j, contiguous (the fast layout
    for a decoding step). Each row meets only its own adapter's factors.

    Args:
        a_factors: [p][j] adapter p's A of sibling j, (r, d_in); b_factors: [p][j] its B, (d_j, r).
        plan: the rows' :class:`RowPlan`; dtype: the matmuls' (None: the factors' own).
    """

    @torch.no_grad()
    def __init__(
        self,
        a_factors: list[list[torch.Tensor]],
        b_factors: list[list[torch.Tensor]],
        plan: RowPlan,
        dtype: torch.dtype | None = None,
    ) -> None:
        a = torch.cat([f for per_slot in a_factors for f in per_slot])
        dtype = dtype or a.dtype
        self.plan = plan
        self.a = a.view(len(a_factors), -1, a.shape[-1]).to(dtype)
        self.a_dense: torch.Tensor | None = None  # sibling-major (G·P·r, d_in), made on first decoding step
        self.mask_dense: torch.Tensor | None = None
        siblings = len(b_factors[0])
        self.bt = [
            torch.stack([per_slot[j].t() for per_slot in b_factors]).mul_(plan.scale).to(dtype) for j in range(siblings)
        ]  # one allocation each, no temporaries

    def shrink(self, x: torch.Tensor, tokens: int) -> tuple[torch.Tensor, ...]:
        """hᵀ of ``x`` (N, T, d_in) per sibling: G tensors (P, r, n·T) in the factors' dtype; for at
        most :data:`DENSE_ROWS` rows × tokens, G tensors (N·T, P·r) of the dense layout instead."""
        plan, d_in = self.plan, x.shape[-1]
        if plan.rows * tokens <= DENSE_ROWS:
            return self._shrink_dense(x, tokens)
        x3 = x.reshape(plan.rows, tokens, d_in).to(self.a.dtype)
        if not plan.identity:
            x3 = x3.index_select(0, plan.gather)
        h_t = torch.bmm(self.a, x3.reshape(plan.count, -1, d_in).transpose(1, 2))  # (P, G·r, n·T)
        if plan.padded:
            h_t.view(plan.count, -1, plan.width, tokens).mul_(plan.keep.to(h_t.dtype))
        return h_t.split(plan.rank, dim=1)

    def _shrink_dense(self, x: torch.Tensor, tokens: int) -> tuple[torch.Tensor, ...]:
        """A decoding step's hᵀ: one matmul over every used adapter's A's (P times the LoRA flops, no
        gather), each row's own adapter kept by the plan's row mask: G views (N·T, P·r)."""
        plan, d_in, width = self.plan, x.shape[-1], self.plan.count * self.plan.rank
        if self.a_dense is None:
            siblings = self.a.shape[1] // plan.rank
            self.a_dense = self.a.view(plan.count, siblings, plan.rank, d_in).transpose(0, 1).reshape(-1, d_in)
            self.mask_dense = plan.row_mask.repeat(1, siblings).to(self.a.dtype).unsqueeze(1)  # (N, 1, G·P·r)
        h = torch.mm(x.reshape(-1, d_in).to(self.a.dtype), self.a_dense.t())  # (N·T, G·P·r) sibling-major
        h.view(plan.rows, tokens, -1).mul_(self.mask_dense)
        return h.split(width, dim=1)

    def expand_(self, out: torch.Tensor, h_t: torch.Tensor, j: int) -> None:
        """``out`` (N, T, d_j) += sibling j's delta of ``h_t`` (P, r, n·T) (from :meth:`shrink`), in the
        factors' dtype, rounded once into out's (a view when the rows come grouped, else ``index_add_``)."""
        plan, bt, d_out = self.plan, self.bt[j], out.shape[-1]
        if h_t.dim() == 2:  # the dense layout (N·T, P·r) of a decoding step
            bt, out2 = bt.view(-1, d_out), out.view(-1, d_out)
            if out.dtype == bt.dtype:
                out2.addmm_(h_t, bt)
            else:
                out2.add_(torch.mm(h_t, bt).to(out.dtype))
            return
        h = h_t.transpose(1, 2)  # (P, n·T, r)
        if plan.identity and out.dtype == bt.dtype:
            out.view(plan.count, -1, d_out).baddbmm_(h, bt)
        elif plan.identity:
            out.view(plan.count, -1, d_out).add_(torch.bmm(h, bt))
        else:
            delta = torch.bmm(h, bt).view(-1, out.shape[1], d_out)  # (P·n, T, d_out)
            out.index_add_(0, plan.gather, delta.to(out.dtype))


def masked_delta_(
    output: torch.Tensor, x: torch.Tensor, a_cat: torch.Tensor, b_cat: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """The update's routed delta, with the graph to the factors: two dense matmuls over the used
    adapters' factors concatenated (P times the LoRA flops, plain 2-D matmuls).

    Shapes: ``output`` (N, T, d_out) W x (a fresh tensor, not saved for backward), ``x`` (N, T, d_in),
    ``a_cat`` (P·r, d_in), ``b_cat`` (d_out, P·r), ``mask`` (N, 1, P·r): s on the r columns of each
    row's adapter (all zero for a base row), so x·A_catᵀ keeps only the row's own adapter.

    Returns:
        W x + delta: ``output`` itself (added in place, fused) when every dtype agrees and it is
        contiguous, else a new tensor in output's dtype (the delta computed in the factors' dtype by
        :class:`LoraDelta`, rounded once).
    """
    n, pr = x.shape[0], a_cat.shape[0]
    if x.dtype == a_cat.dtype == output.dtype and output.is_contiguous():
        hidden = torch.matmul(x.reshape(-1, x.shape[-1]), a_cat.t()).view(n, -1, pr).mul_(mask)
        output.view(-1, output.shape[-1]).addmm_(hidden.view(-1, pr), b_cat.t())
        return output
    delta = LoraDelta.apply(x.reshape(n, -1, x.shape[-1]), a_cat, b_cat, mask)  # (N, T, d_out)
    return output + delta.reshape(output.shape).to(output.dtype)


class LoraDelta(torch.autograd.Function):
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
