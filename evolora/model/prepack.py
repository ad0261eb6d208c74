"""oneDNN-packed copies of the frozen base linears on the CPU, shared by rollouts and updates.

At 1 thread and batch 8, the fp32 SmolLM2 LM head (49152 × 576) ran 2.45x faster (70.3 → 28.7 ms
on a shared 2-core Intel Xeon, docs/performance.md) with its weight reordered once into oneDNN's
blocked layout (``torch.ops.mkldnn._reorder_linear_weight``) and multiplied by ``_linear_pointwise``:
the ops Inductor's freezing pass uses, here called eagerly. The decoder's own linears gain less
per call (``benchmarks/prepack_gemm.py``, 1 thread, batch 8, against what the eager decode runs:
gate/up 1536 × 576 624 → 375 µs, down 576 × 1536 552 → 405 µs, q/o 128 → 107 µs; the 192 × 576 k/v
32 → 45 µs, slower, so ``auto`` leaves layers under :data:`AUTO_MIN_LAYER_WEIGHTS`).
The outputs differ from ``F.linear`` by float reassociation (1.5e-5 there), so the paths whose
log-probs must agree (the rollout's decode and the update's
:func:`evolora.generation.logprobs.token_logprobs`) use one GEMM: :func:`prepack_head` and
:func:`prepack_layers` swap the model's own modules for :class:`PackedLinear`, whose
:meth:`~PackedLinear.linear` both paths call (adapters wrap it as they wrap ``nn.Linear``).

    prepack_model(model, "auto")    # (head packed?, number of layer linears packed)
    head = model.get_output_embeddings()
    head.linear(hidden)             # (…, d) -> (…, V), the packed GEMM (F.linear off the CPU)

Each packed copy costs its weights once more (the head 113 MB and the layers 398 MB for SmolLM2 in
fp32): ``auto`` packs the layers only where their copies take at most :data:`MEMORY_SHARE` of the
memory available. The modules' own weights stay (tied embeddings keep sharing the head's; the
update's backward reads them). Gradients flow to the input only: backward is ``grad_out @ W``, the
frozen weight gets none (:class:`PackedLinear` falls back to ``F.linear`` when the weight requires grad).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM

AUTO_MIN_WEIGHTS = 2**20
"""``prepack: auto`` packs heads of at least this many weights (the reorder pays on large GEMMs only)."""
AUTO_MIN_LAYER_WEIGHTS = 2**18
"""``prepack: auto`` packs the decoder's linears of at least this many weights (SmolLM2's q/o, gate/up
and down; not its 192 × 576 k/v, which ran slower packed)."""
MEMORY_SHARE = 0.125
"""``prepack: auto`` packs the decoder's linears only when their copies take at most this share of the
memory available now (``MemAvailable``; always where it cannot be read)."""
CHECK_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}
"""Max |packed − F.linear| / max |F.linear| of the one-shot check (:func:`prepack_supported`) and the tests."""


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """The oneDNN blocked copy of a (d_out, d_in) CPU weight (an opaque mkldnn tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach())


def packed_linear(x: torch.Tensor, packed: torch.Tensor, d_out: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ Wᵀ (+ bias)`` through the packed weight, no gradient. Shapes: x (…, d_in), bias (d_out,)
    -> (…, d_out)."""
    out = torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    assert out.shape[-1] == d_out, (out.shape, d_out)
    return out


@functools.lru_cache(maxsize=None)
def prepack_supported(dtype: torch.dtype) -> bool:
    """Whether this torch has the packed-linear ops and they pass a one-shot check in ``dtype``
    (a seeded (64, 48) weight, 3 rows: within :data:`CHECK_TOLERANCE` of ``F.linear``); cached."""
    ops = torch.ops.mkldnn
    if (
        dtype not in CHECK_TOLERANCE
        or not torch.backends.mkldnn.is_available()
        or not all(hasattr(ops, name) for name in ("_reorder_linear_weight", "_linear_pointwise"))
    ):
        return False
    generator = torch.Generator(device="cpu").manual_seed(0)  # the packed ops are CPU ops
    weight = torch.randn(64, 48, generator=generator, device="cpu").to(dtype)
    x = torch.randn(3, 48, generator=generator, device="cpu").to(dtype)
    try:
        out = packed_linear(x, pack_weight(weight), 64).float()
    except (RuntimeError, AssertionError):
        return False
    reference = F.linear(x, weight).float()
    return bool((out - reference).abs().max() <= CHECK_TOLERANCE[dtype] * reference.abs().max())


class _PackedMatmul(torch.autograd.Function):
    """y = x Wᵀ (+ b) through the packed copy; backward: grad_x = grad_y W (the frozen W and b get none)."""

    @staticmethod
    def forward(ctx, x, weight, packed, bias):
        ctx.save_for_backward(weight)
        return packed_linear(x, packed, weight.shape[0], bias)

    @staticmethod
    def backward(ctx, grad_out):
        (weight,) = ctx.saved_tensors
        return grad_out.to(weight.dtype) @ weight, None, None, None


class PackedLinear(torch.nn.Linear):
    """A frozen ``nn.Linear`` whose forward runs the oneDNN-packed copy of its weight.

    It holds the original ``weight`` and ``bias`` Parameters (a weight shared with a tied embedding,
    saved as before) and the packed copy as a plain attribute (not in ``state_dict``). Inputs of another dtype or
    device, a weight or bias that requires grad, or a weight changed or replaced since packing (its
    ``_version``, storage or dtype) take ``F.linear``. Build it with :meth:`from_linear`.
    """

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> PackedLinear:
        """Wrap ``linear`` (on the CPU): same weight and bias Parameters, a packed copy beside them.

        Raises:
            ValueError: ``linear`` is not on the CPU.
        """
        if linear.weight.device.type != "cpu":
            raise ValueError("only a linear layer on the CPU can be packed")
        module = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        module.in_features, module.out_features = linear.in_features, linear.out_features
        module.weight = linear.weight
        module.register_parameter("bias", linear.bias)  # the same Parameter, or None
        module.repack()
        return module

    def repack(self) -> None:
        """Pack the current weight again (after changing it in place)."""
        self.packed = pack_weight(self.weight)
        self.packed_as = (self.weight._version, self.weight.data_ptr(), self.weight.dtype)

    def uses_pack(self, x: torch.Tensor) -> bool:
        """Whether :meth:`linear` of ``x`` runs the packed copy."""
        weight, bias = self.weight, self.bias
        return (
            x.device.type == "cpu"
            and weight.device.type == "cpu"
            and x.dtype == weight.dtype
            and not weight.requires_grad
            and (bias is None or (not bias.requires_grad and bias.dtype == weight.dtype))
            and (weight._version, weight.data_ptr(), weight.dtype) == self.packed_as
        )

    def linear(self, x: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ Wᵀ``: (…, d_in) -> (…, d_out), packed where :meth:`uses_pack` says so.
        ``weight``: for the ``(x, weight)`` signature of ``F.linear``; must be this layer's weight."""
        if weight is not None and weight is not self.weight:
            return F.linear(x, weight)
        if not self.uses_pack(x):
            return F.linear(x, self.weight, self.bias)
        if x.requires_grad:  # 2-D through the Function: its output must not be a view (adapters add in place)
            out = _PackedMatmul.apply(x.reshape(-1, x.shape[-1]), self.weight, self.packed, self.bias)
            return out.view(*x.shape[:-1], self.out_features)
        return packed_linear(x, self.packed, self.out_features, self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)

    def __deepcopy__(self, memo: dict) -> PackedLinear:
        copy = PackedLinear.from_linear(torch.nn.Linear(self.in_features, self.out_features, bias=False))
        copy.weight = torch.nn.Parameter(self.weight.detach().clone(), requires_grad=self.weight.requires_grad)
        if self.bias is not None:
            copy.bias = torch.nn.Parameter(self.bias.detach().clone(), requires_grad=self.bias.requires_grad)
        copy.repack()
        return copy


def head_linear(head: torch.nn.Module):
    """The ``(x, weight) -> x @ weightᵀ`` of an LM head module: its packed :meth:`PackedLinear.linear`
    when it is one, else ``F.linear``."""
    return head.linear if isinstance(head, PackedLinear) else F.linear


def prepack_head(model: CausalLM, setting: Literal["auto"] | bool = "auto") -> bool:
    """Swap ``model``'s LM head (``get_output_embeddings``) for a :class:`PackedLinear` in place.

    ``"auto"``: a bias-free float32 head of at least :data:`AUTO_MIN_WEIGHTS` weights on the CPU,
    where :func:`prepack_supported`; ``True``: any bias-free float32 or bfloat16 CPU head; ``False``:
    nothing. Returns whether the head is packed now.

    Raises:
        ValueError: ``True`` where it cannot be done (no plain linear head, not on the CPU, a
            dtype or torch build without packed ops), or a setting other than auto/True/False.
    """
    if setting not in ("auto", True, False):
        raise ValueError(f"model.prepack must be auto, true or false; got {setting!r}")
    if setting is False:
        return False
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if isinstance(head, PackedLinear):
        return True
    plain = isinstance(head, torch.nn.Linear) and head.bias is None
    weight = head.weight if plain else None
    problem = (
        "the model has no bias-free linear LM head"
        if weight is None
        else f"the LM head is on {weight.device.type}, not the CPU"
        if weight.device.type != "cpu"
        else f"this torch cannot pack a {weight.dtype} head (oneDNN ops missing or failing their check)"
        if not prepack_supported(weight.dtype)
        else None
    )
    if setting == "auto":
        if problem or weight.dtype != torch.float32 or weight.numel() < AUTO_MIN_WEIGHTS:
            return False
    elif problem:
        raise ValueError(f"model.prepack=true, but {problem}; set model.prepack=auto or false")
    model.set_output_embeddings(PackedLinear.from_linear(head))
    return True


def _available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes (None where it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def layer_linears(model: CausalLM, min_weights: int = 0) -> list[tuple[str, torch.nn.Linear]]:
    """The frozen plain ``nn.Linear`` modules of ``model`` other than its LM head, with at least
    ``min_weights`` weights: ``(qualified name, module)`` in module order."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    return [
        (name, module)
        for name, module in model.named_modules()
        if type(module) is torch.nn.Linear
        and module is not head
        and not module.weight.requires_grad
        and module.weight.numel() >= min_weights
    ]


def prepack_layers(model: CausalLM, setting: Literal["auto"] | bool = "auto") -> int:
    """Swap the decoder's frozen linears (:func:`layer_linears`) for :class:`PackedLinear` in place.

    ``"auto"``: float32 CPU linears of at least :data:`AUTO_MIN_LAYER_WEIGHTS` weights, where
    :func:`prepack_supported` and their copies take at most :data:`MEMORY_SHARE` of the memory
    available; ``True``: every frozen float32 or bfloat16 CPU linear; ``False``: nothing. Returns the
    number of linears packed now (0 where none qualify). Call it before adapters wrap the layers.

    Raises:
        ValueError: ``True`` where it cannot be done (weights off the CPU, or a dtype this torch
            cannot pack), or a setting other than auto/True/False.
    """
    if setting not in ("auto", True, False):
        raise ValueError(f"model.prepack must be auto, true or false; got {setting!r}")
    chosen = layer_linears(model, AUTO_MIN_LAYER_WEIGHTS if setting == "auto" else 0) if setting is not False else []
    if not chosen:
        return 0
    weight = chosen[0][1].weight
    supported = weight.device.type == "cpu" and prepack_supported(weight.dtype)
    if setting == "auto":
        available = _available_bytes()
        copies = sum(m.weight.numel() * m.weight.element_size() for _, m in chosen)
        if not supported or weight.dtype != torch.float32 or (available and copies > MEMORY_SHARE * available):
            return 0
    elif not supported:
        raise ValueError(
            f"model.prepack=true, but this torch cannot pack {weight.dtype} linears on {weight.device.type}; "
            "set model.prepack=auto or false"
        )
    for name, module in chosen:
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent), leaf, PackedLinear.from_linear(module))
    return len(chosen)


def prepack_model(model: CausalLM, setting: Literal["auto"] | bool = "auto") -> tuple[bool, int]:
    """:func:`prepack_head` and :func:`prepack_layers` of ``model`` in place: (head packed, layers packed)."""
    return prepack_head(model, setting), prepack_layers(model, setting)


def check_prepack(setting, device: str, dtype: torch.dtype) -> None:
    """Refuse, before a model loads, a ``model.prepack`` setting that cannot hold: not auto/True/False,
    or ``True`` off the CPU or in a dtype this torch cannot pack (:func:`prepack_supported`).

    Raises:
        ValueError: the setting and what to change.
    """
    if setting not in ("auto", True, False):
        raise ValueError(f"model.prepack must be auto, true or false; got {setting!r}")
    if setting is True and not str(device).startswith("cpu"):
        raise ValueError(
            f"model.prepack=true packs the base's linears on a CPU, but the model goes to {device}; "
            "set model.prepack=auto"
        )
    if setting is True and not prepack_supported(dtype):
        raise ValueError(
            f"model.prepack=true, but this torch cannot pack a {dtype} head (oneDNN ops missing or "
            "failing their check); set model.prepack=auto or false"
        )


def prepacked(model: CausalLM, setting: Literal["auto"] | bool) -> CausalLM:
    """``model`` after :func:`prepack_model` (the same object)."""
    prepack_model(model, setting)
    return model
