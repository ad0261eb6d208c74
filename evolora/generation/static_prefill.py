"""The graph engine's prompt prefill through the static step's weights, with no ``transformers`` forward.

:func:`prefill_static` runs every prompt position of a left-padded batch (B, T) through the same
tensors as :func:`evolora.generation.static_step.decode_step` (:class:`~evolora.generation.static_step.StaticWeights`:
the fused q/k/v and gate/up base GEMMs, one stacked-LoRA call per sibling group over all B·T
positions, :class:`~evolora.generation.lora_stack.DenseStack` on the step's backend), writes each
layer's k|v straight into the static cache (:class:`~evolora.generation.static_cache.StaticBuffers`'
``kv``, columns [0, T)) and returns the last position's logits. Per layer, the pieces whose kernels
are decode-only take their torch path over the whole prompt:

* rotary: HF's ``x·cos + rotate_half(x)·sin`` (q/k norms first for ``qwen3``) on the q/k heads of the
  q/k/v GEMM's first copy (:func:`~evolora.generation.static_step.qkv_order`; the halves-swapped copy,
  where the weights have one, is not read);
* attention: one ``scaled_dot_product_attention`` per layer, the G query heads of a key/value head
  folded into the query axis (G·T queries against T keys: no k/v repeat), under the causal and
  left-padding mask (:func:`prompt_mask`);
* silu(gate) · up: the step's own choice (the Triton kernel with ``fused_mlp``: it takes any rows).

Rows with the same prompt and adapter (a student's samples of one problem) run once and their cache
columns are copied, as the eager prefill (:class:`evolora.generation.decode.Decoder`) does. In fp32
the cache columns a row attends and the logits equal the eager prefill's up to summation order
(tested to 1e-5); pad columns hold finite values no row attends.
Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-3 (rollouts); S-LoRA (arXiv 2311.03285) for batching
the prefill's rows of many adapters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from evolora.generation.lora_stack import slot_onehot
from evolora.generation.static_step import _linear, _mlp, _norm, _project

if TYPE_CHECKING:
    from evolora.generation.static_step import StaticWeights


def prompt_mask(attention: torch.Tensor, group: int = 1) -> torch.Tensor:
    """(B, 1, G·T, T) bool, True where query position i may attend key position j: j <= i and j a
    prompt token of the row (``attention`` (B, T) 0/1, left padded), or j = i (a pad query attends
    itself only, so its output stays finite); the T rows repeated for each of the ``group`` G query
    heads folded into the query axis.

    Raises:
        ValueError: ``attention`` not 2-D, or ``group < 1``.
    """
    if attention.dim() != 2 or group < 1:
        raise ValueError(f"attention must be (B, T) and group >= 1, got {tuple(attention.shape)} and {group}")
    width = attention.shape[1]
    causal = torch.ones(width, width, dtype=torch.bool, device=attention.device).tril()
    allowed = (causal & attention.bool()[:, None, :]) | torch.eye(width, dtype=torch.bool, device=attention.device)
    return allowed[:, None].repeat(1, group, 1, 1).view(-1, 1, group * width, width)


def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """HF's ``x·cos + rotate_half(x)·sin`` (``cos``, ``sin`` broadcast against x's last dim D)."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


def _attention(w: StaticWeights, attn, y: torch.Tensor, tables: tuple, mask: torch.Tensor, kv: torch.Tensor):
    """One layer's attention over the prompt from the q/k/v GEMM's output ``y`` (B·T, d_out): rotary,
    k|v written into ``kv`` (2, B, H_kv, C, D) at columns [0, T); returns the context (B·T, H_q·D)."""
    rows, width = tables[0].shape[:2]
    hk, group, d = w.kv_heads, w.heads // w.kv_heads, w.head_dim
    y = y.view(rows, width, -1, hk, group + 2, d)[:, :, 0]  # (B, T, H_kv, G + 2, D): the first copy
    k, v, q = y[:, :, :, 0], y[:, :, :, 1], y[:, :, :, 2:]
    if hasattr(attn, "q_norm"):
        k, q = attn.k_norm(k), attn.q_norm(q)
    cos, sin = tables[0][:, :, None], tables[1][:, :, None]  # (B, T, 1, D)
    kv[0, :, :, :width] = _rotary(k, cos, sin).transpose(1, 2)  # (B, H_kv, T, D)
    kv[1, :, :, :width] = v.transpose(1, 2)
    q = _rotary(q, cos[:, :, :, None], sin[:, :, :, None])  # (B, T, H_kv, G, D)
    q = q.permute(0, 2, 3, 1, 4).reshape(rows, hk, group * width, d)
    keys, values = kv[0, :, :, :width], kv[1, :, :, :width]
    context = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=w.scaling)
    return context.view(rows, hk, group, width, d).permute(0, 3, 1, 2, 4).reshape(rows * width, w.heads * d)


def _forward(
    w: StaticWeights, kv: torch.Tensor, input_ids: torch.Tensor, attention: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    """Every layer over the (B, T) prompts routed by ``slots`` (B,); k|v into ``kv`` (L, 2, B, H_kv, C, D).
    Returns (B, V) last-position logits."""
    rows, width = input_ids.shape
    position = (attention.cumsum(-1) - 1).masked_fill(attention == 0, 0)  # the eager prefill's positions
    embedded = w.embed(input_ids)  # (B, T, d)
    tables = w.rotary(embedded, position)  # cos, sin (B, T, D)
    mask = prompt_mask(attention, w.heads // w.kv_heads)
    per_token = slots.repeat_interleave(width)  # (B·T,) each position's slot (−1: the bare base)
    route = slot_onehot(per_token, w.slots) if w.kernels == "torch" else per_token
    hidden = embedded.reshape(rows * width, -1)
    for i, (layer, attn, (qkv, out, gate_up, down)) in enumerate(w.layers):
        x = _norm(hidden, layer.input_layernorm)
        context = _attention(w, attn, _project(x, qkv, route), tables, mask, kv[i])
        hidden = _project(context, out, route, into=hidden)
        hidden = _mlp(w, layer, hidden, gate_up, down, route)  # (B·T, d)
    last = hidden.view(rows, width, -1)[:, -1]
    return _linear(_norm(last, w.norm), w.head, None)


@torch.no_grad()
def prefill_static(
    w: StaticWeights, kv: torch.Tensor, input_ids: torch.Tensor, attention: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    """Prefill a left-padded batch into the static cache; returns the (B, V) last-position logits.

    Shapes: ``kv`` (L, 2, S, H_kv, C, D) the cache (S >= B slots, C >= T columns; rows [0, B) and
    columns [0, T) written); ``input_ids``, ``attention`` (B, T) long, left padded (every row's last
    column a prompt token); ``slots`` (B,) long, each row's bank slot (−1: the bare base). The logits
    are in the model's dtype.

    Raises:
        ValueError: shapes that do not fit, or a row whose last column is padding.
    """
    rows, width = input_ids.shape
    if attention.shape != input_ids.shape or slots.shape != (rows,):
        raise ValueError(
            f"attention and slots must be {(rows, width)} and {(rows,)}, got "
            f"{tuple(attention.shape)} and {tuple(slots.shape)}"
        )
    if kv.shape[2] < rows or kv.shape[4] < width:
        raise ValueError(f"the cache holds {kv.shape[2]} rows of {kv.shape[4]} columns, the batch is {(rows, width)}")
    if rows and not bool(attention[:, -1].all()):
        raise ValueError("prompts must be left padded: every row's last column a prompt token")
    keys = [(tuple(row), slot) for row, slot in zip(input_ids.tolist(), slots.tolist())]
    first = {key: i for i, key in reversed(list(enumerate(keys)))}
    unique = sorted(set(first.values()))
    if len(unique) == rows:
        return _forward(w, kv[:, :, :rows], input_ids, attention, slots)
    pick = torch.tensor(unique, device=input_ids.device)
    logits = _forward(w, kv[:, :, : len(unique)], input_ids[pick], attention[pick], slots[pick])
    index = torch.tensor([unique.index(first[key]) for key in keys], device=input_ids.device)
    kv[:, :, :rows, :, :width] = kv[:, :, index, :, :width]  # the gather copies before the write
    return logits[index]
