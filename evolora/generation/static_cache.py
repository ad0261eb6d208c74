"""The graph engine's static state and its one decode step with sampling, on fixed buffers.

:class:`StaticBuffers` holds every tensor a step reads or writes (the KV cache, masks, positions,
tokens, routes, sampling settings and noise), allocated once; :func:`step` runs
:func:`evolora.generation.static_step.decode_step` and :func:`sample` on them, in place, with no
host sync, so :mod:`evolora.generation.graph` can capture it in a CUDA graph.
Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-3 (rollouts).
"""

from __future__ import annotations

import torch

from evolora.generation.decode import top_p_filter
from evolora.generation.static_step import StaticWeights, decode_step


class StaticBuffers:
    """Every tensor the step reads or writes, allocated once for ``slots`` rows and ``capacity``
    cache columns. Row buffers are indexed by slot; ``out`` (slots + 1, capacity) by original
    row (the last row takes the tokens of padding slots)."""

    def __init__(self, w: StaticWeights, slots: int, capacity: int) -> None:
        dev, layers = w.device, len(w.layers)
        self.slots, self.capacity = slots, capacity
        self.kv = torch.zeros(layers, 2, slots, w.kv_heads, capacity, w.head_dim, dtype=w.dtype, device=dev)
        self.keys, self.values = self.kv[:, 0], self.kv[:, 1]  # (L, slots, H_kv, C, D) views
        self.valid = torch.zeros(slots, capacity, dtype=torch.bool, device=dev)
        self.position = torch.zeros(slots, dtype=torch.long, device=dev)
        self.last = torch.zeros(slots, dtype=torch.long, device=dev)
        self.done = torch.ones(slots, dtype=torch.bool, device=dev)
        self.rows = torch.full((slots,), slots, dtype=torch.long, device=dev)
        self.noise_rows = torch.zeros(slots, dtype=torch.long, device=dev)
        self.onehot = torch.zeros(slots, w.slots, dtype=torch.float32, device=dev)
        self.out = torch.zeros(slots + 1, capacity, dtype=torch.long, device=dev)
        self.column = torch.zeros(1, dtype=torch.long, device=dev)
        self.step = torch.zeros(1, dtype=torch.long, device=dev)
        self.min_new = torch.zeros(1, dtype=torch.long, device=dev)
        self.pad = torch.zeros(1, dtype=torch.long, device=dev)
        self.eos = torch.zeros(w.vocab, dtype=torch.bool, device=dev)
        self.temperature = torch.ones(1, dtype=torch.float32, device=dev)
        self.tail = torch.zeros(1, dtype=torch.float32, device=dev)  # 1 - top_p, rounded as choose_tokens does
        self.noise: dict[int, torch.Tensor] = {}  # (B, V) exponential noise per call size B

    def per_slot(self) -> list[torch.Tensor]:
        return [self.valid, self.position, self.last, self.done, self.rows, self.noise_rows, self.onehot]

    def compact(self, keep: torch.Tensor, size: int) -> None:
        """Move slots ``keep`` (n,) long to slots [0, n); slots [n, size) become ended padding."""
        n = len(keep)
        self.kv[:, :, :n] = self.kv[:, :, keep]
        for buffer in self.per_slot():
            buffer[:n] = buffer[keep]
        self.done[n:size] = True
        self.rows[n:size] = self.slots
        self.noise_rows[n:size] = 0
        self.onehot[n:size] = 0


def sample(
    b: StaticBuffers,
    logits: torch.Tensor,
    rows: int,
    *,
    greedy: bool,
    top_p: bool,
    total: int,
    generator: torch.Generator | None,
) -> torch.Tensor:
    """:func:`evolora.generation.decode.choose_tokens` on fixed buffers: (rows, V) logits → (rows,) long.

    EOS is masked before ``min_new`` tokens; temperature and 1 − top_p are tensors (``top_p``: apply
    the top-p cut); the noise is drawn in place over the (total, V) buffer ``b.noise[total]`` and read
    at each slot's ``noise_rows`` (the slot's row of the call). ``logits`` is modified in place."""
    logits.masked_fill_(b.eos & (b.step < b.min_new), -float("inf"))
    if greedy:
        return logits.argmax(dim=-1)
    scores = logits.float() / b.temperature
    if top_p:
        scores = top_p_filter(scores, b.tail)
    noise = b.noise[total].exponential_(1, generator=generator)
    noise = noise.index_select(0, b.noise_rows[:rows]) if rows != total else noise  # slot i = row i when equal
    return (scores.softmax(dim=-1) / noise).argmax(dim=-1)


def step(
    w: StaticWeights,
    b: StaticBuffers,
    rows: int,
    window: int,
    *,
    greedy: bool,
    top_p: bool,
    total: int,
    generator: torch.Generator | None,
) -> None:
    """One decode step of slots [0, rows), in place: feed ``b.last``, attend cache columns [0, window),
    choose (:func:`sample`), write the token (``pad`` for ended rows) at ``out[row, step]``, mark rows
    that wrote an EOS ended, advance positions, the write column and the step."""
    logits = decode_step(
        w, b.last[:rows], b.position[:rows], b.column, b.kv[:, :, :rows], b.valid[:rows], b.onehot[:rows], window
    )
    token = sample(b, logits, rows, greedy=greedy, top_p=top_p, total=total, generator=generator)
    done = b.done[:rows]
    token = torch.where(done, b.pad, token)
    b.out.index_put_((b.rows[:rows], b.step.expand(rows)), token)
    done |= b.eos[token]
    b.last[:rows] = token
    b.position[:rows] += 1
    b.column += 1
    b.step += 1
