"""A oneDNN-packed copy of the frozen LM head on the CPU, shared by rollouts and updates.

At 1 thread and batch 8, the fp32 SmolLM2 LM head (49152 × 576) ran 2.45x faster (70.3 → 28.7 ms
on a shared 2-core Intel Xeon, docs/performance.md) with its weight reordered once into oneDNN's
blocked layout (``torch.ops.mkldnn._reorder_linear_weight``) and multiplied by ``_linear_pointwise``:
the ops Inductor's freezing pass uses, here called eagerly. The outputs differ from ``F.linear`` by
float reassociation (1.5e-5 there), so the paths whose log-probs must agree (the
rollout's decode and the update's :func:`evolora.generation.logprobs.token_logprobs`) use one
GEMM: :func:`prepack_head` swaps the model's own head module for a :class:`PackedLinear`, whose
:meth:`~PackedLinear.linear` both paths call.

    prepack_head(model, "auto")     # True when packed: float32 CPU heads of >= 2**20 weights
    head = model.get_output_embeddings()
    head.linear(hidden)             # (…, d) -> (…, V), the packed GEMM (F.linear off the CPU)

The packed copy costs V × d more weights (113 MB for SmolLM2 in fp32); the head's own weight
stays (tied embeddings keep sharing it). Gradients flow to the input only: backward is
``grad_out @ W``, the frozen weight gets none (:class:`PackedLinear` falls back to ``F.linear``
when the weight requires grad).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Literal

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM

AUTO_MIN_WEIGHTS = 2**20
"""``prepack: auto`` packs heads of at least this many weights (the reorder pays on large GEMMs only)."""
CHECK_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}
"""Max |packed − F.linear| / max |F.linear| of the one-shot check (:func:`prepack_supported`) and the tests."""


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """The oneDNN blocked copy of a (d_out, d_in) CPU weight (an opaque mkldnn tensor)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach())


def packed_linear(x: torch.Tensor, packed: torch.Tensor, d_out: int) -> torch.Tensor:
    """``x @ Wᵀ`` through the packed weight, no gradient. Shapes: x (…, d_in) -> (…, d_out)."""
    out = torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
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
    """y = x Wᵀ through the packed copy; backward: grad_x = grad_y W (the frozen W gets none)."""

    @staticmethod
    def forward(ctx, x, weight, packed):
        ctx.save_for_backward(weight)
        return packed_linear(x, packed, weight.shape[0])

    @staticmethod
    def backward(ctx, grad_out):
        (weight,) = ctx.saved_tensors
        return grad_out.to(weight.dtype) @ weight, None, None


class PackedLinear(torch.nn.Linear):
    """A bias-free frozen ``nn.Linear`` whose forward runs the oneDNN-packed copy of its weight.

    It holds the original ``weight`` Parameter (shared with a tied embedding, saved as before) and
    the packed copy as a plain attribute (not in ``state_dict``). Inputs of another dtype or
    device, a weight that requires grad, or a weight changed or replaced since packing (its
    ``_version``, storage or dtype) take ``F.linear``. Build it with :meth:`from_linear`.
    """

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear) -> PackedLinear:
        """Wrap ``linear`` (bias-free, on the CPU): same weight Parameter, a packed copy beside it.

        Raises:
            ValueError: ``linear`` has a bias or is not on the CPU.
        """
        if linear.bias is not None or linear.weight.device.type != "cpu":
            raise ValueError("only a bias-free linear layer on the CPU can be packed")
        module = cls.__new__(cls)
        torch.nn.Module.__init__(module)
        module.in_features, module.out_features = linear.in_features, linear.out_features
        module.weight = linear.weight
        module.register_parameter("bias", None)
        module.repack()
        return module

    def repack(self) -> None:
        """Pack the current weight again (after changing it in place)."""
        self.packed = pack_weight(self.weight)
        self.packed_as = (self.weight._version, self.weight.data_ptr(), self.weight.dtype)

    def uses_pack(self, x: torch.Tensor) -> bool:
        """Whether :meth:`linear` of ``x`` runs the packed copy."""
        weight = self.weight
        return (
            x.device.type == "cpu"
            and weight.device.type == "cpu"
            and x.dtype == weight.dtype
            and not weight.requires_grad
            and (weight._version, weight.data_ptr(), weight.dtype) == self.packed_as
        )

    def linear(self, x: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """``x @ Wᵀ``: (…, d_in) -> (…, d_out), packed where :meth:`uses_pack` says so.
        ``weight``: for the ``(x, weight)`` signature of ``F.linear``; must be this layer's weight."""
        if weight is not None and weight is not self.weight:
            return F.linear(x, weight)
        if not self.uses_pack(x):
            return F.linear(x, self.weight)
        if x.requires_grad:
            return _PackedMatmul.apply(x, self.weight, self.packed)
        return packed_linear(x, self.packed, self.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)

    def __deepcopy__(self, memo: dict) -> PackedLinear:
        copy = PackedLinear.from_linear(torch.nn.Linear(self.in_features, self.out_features, bias=False))
        copy.weight = torch.nn.Parameter(self.weight.detach().clone(), requires_grad=self.weight.requires_grad)
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
            f"model.prepack=true packs a CPU LM head, but the model goes to {device}; set model.prepack=auto"
        )
    if setting is True and not prepack_supported(dtype):
        raise ValueError(
            f"model.prepack=true, but this torch cannot pack a {dtype} head (oneDNN ops missing or "
            "failing their check); set model.prepack=auto or false"
        )


def prepacked(model: CausalLM, setting: Literal["auto"] | bool) -> CausalLM:
    """``model`` after :func:`prepack_head` (the same object)."""
    prepack_head(model, setting)
    return model
