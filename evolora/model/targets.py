"""Which linear layers carry adapters: ``all-linear`` resolved on the model, or an explicit list.

    resolve_target_modules(model, "all-linear")   # llama: (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)
                                                  # phi3:  (qkv_proj, o_proj, gate_up_proj, down_proj)
                                                  # gpt_neox: (query_key_value, dense, dense_h_to_4h, dense_4h_to_h)

``all-linear`` (PEFT's name for the same choice) is every ``nn.Linear`` inside the decoder
blocks, attention and MLP, fused or not; never the LM head or the embeddings. Names are leaf
names (the last part of a module path), as PEFT matches them. Source: PopuLoRA (arXiv
2605.16727) §2 (a LoRA adapter per individual); LoRA (arXiv 2106.09685) on adapting every
weight matrix of the attention and MLP blocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import torch

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM

ALL_LINEAR = "all-linear"
"""The ``lora.target_modules`` value for every linear layer of the decoder blocks (the default)."""

TargetModules = tuple[str, ...] | Literal["all-linear"]
"""What ``lora.target_modules`` accepts: leaf names, or :data:`ALL_LINEAR`."""


def block_linear_names(model: CausalLM) -> tuple[str, ...]:
    """Leaf names of every ``nn.Linear`` of ``model`` except its output embeddings (the LM head),
    in the model's module order, each once.

    Raises:
        ValueError: the model has no such linear layer.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names: dict[str, None] = {}
    for path, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and module is not head and "embed" not in path.rsplit(".", 1)[-1]:
            names[path.rsplit(".", 1)[-1]] = None
    if not names:
        raise ValueError(f"{type(model).__name__} has no linear layer besides its LM head; set lora.target_modules")
    return tuple(names)


def check_targets(targets: tuple[str, ...] | list[str], available: tuple[str, ...] | list[str], where: str) -> None:
    """Refuse explicit target names that are not among ``available`` (the linear layers of ``where``).

    Raises:
        ValueError: one line naming the unknown names, the model's layers and ``all-linear``.
    """
    unknown = [name for name in targets if name not in available]
    if unknown:
        raise ValueError(
            f"lora.target_modules {unknown} match no linear layer of {where}; "
            f"its layers are {sorted(available)} (or use {ALL_LINEAR})"
        )


def check_rank(rank: int, shapes: dict[str, tuple[int, int]], where: str) -> None:
    """Refuse a LoRA rank above the smaller dimension of a target layer: r ≤ min(d_in, d_out) for
    every ``shapes`` entry {name: (d_in, d_out)}, since ΔW = B A has rank ≤ r anyway.

    Raises:
        ValueError: one line naming the layer, its shape and the largest rank that fits them all.
    """
    for name, (d_in, d_out) in shapes.items():
        if rank > min(d_in, d_out):
            limit = min(min(shape) for shape in shapes.values())
            raise ValueError(
                f"lora.rank={rank} exceeds the smaller dimension of {name} ({d_in} -> {d_out}) "
                f"in {where}; set lora.rank <= {limit}"
            )


def resolve_target_modules(model: CausalLM, targets: TargetModules) -> tuple[str, ...]:
    """The leaf names to adapt: :func:`block_linear_names` for ``all-linear``, else ``targets``.

    Raises:
        ValueError: an explicit name that matches no linear layer of the model (the message lists
            the model's names), or a string other than ``all-linear``.
    """
    available = block_linear_names(model)
    if isinstance(targets, str):
        if targets != ALL_LINEAR:
            raise ValueError(f"lora.target_modules is {ALL_LINEAR!r} or a list of module names, got {targets!r}")
        return available
    check_targets(targets, available, "the model")
    return tuple(targets)
