"""The rollout engine: prefill + a decode loop over a preallocated KV cache.

``transformers``' ``generate`` re-concatenates every layer's key/value cache at every step
(``DynamicCache``: 13 % of a batch-8 SmolLM2-135M decode step), runs its logits processors
and stopping criteria over the whole batch, and keeps computing rows that already ended.
Here the model's own forward (so the routed LoRA hooks of :mod:`evolora.generation.routed` fire
unchanged) runs over

* :class:`BufferLayer` caches: one (B, H, T_max, D) buffer per layer and K/V, written in place;
  each step attends to the view ``[:, :, :T]`` (no copy, no attention over unused slots);
* the last position only through the LM head (``logits_to_keep=1``);
* a batch that shrinks: once a quarter of the rows have ended, the cache, the masks and the
  routing (``context``) are cut to the rows still running;
* one prefill per distinct (prompt, adapter) of a batch (a student's samples of one problem),
  its cache copied to the duplicates;
* multi-segment rollouts (:class:`Decoder`, :mod:`evolora.generation.segments`) that continue from the
  cache after forced text instead of re-running the prompt: tokens a segment drops are
  masked out of the cache.

Greedy decoding picks the argmax and sampling draws as ``generate`` does (temperature, top-p,
softmax, ``multinomial``'s exponential race over every row of the batch), so the tokens equal
``generate``'s seed for seed (tested against PEFT's ``adapter_names`` through ``generate``).
Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-3 (the rollouts this engine serves).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, ContextManager

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache, DynamicLayer

from evolora.generation.kernels.stop_mask import FlaggedStop, flagged_rows
from evolora.generation.types import Sampling

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM

COMPACT_AT = 0.25
"""Cut the batch to its running rows once this fraction of them has ended (and >= 2 rows)."""

SKINNY_ROWS = 16
"""Inputs of at most this many rows (decode steps) take :func:`skinny_linears`' product."""


def _skinny_forward(module: torch.nn.Linear):
    weight, bias = module.weight, module.bias

    def forward(x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if rows > SKINNY_ROWS or x.dtype != weight.dtype:
            return F.linear(x if x.is_contiguous() else x.contiguous(), weight, bias)  # see skinny_linears
        y = torch.mm(weight, x.reshape(rows, -1).t()).t().contiguous()  # (W xᵀ)ᵀ: W streamed row-major
        return (y if bias is None else y.add_(bias)).view(*x.shape[:-1], -1)

    return forward


@contextlib.contextmanager
def skinny_linears(model: CausalLM):
    """Inside, ``nn.Linear`` layers of ``model`` with d_out >= d_in compute few-row inputs as
    (W xᵀ)ᵀ instead of x Wᵀ (same values up to fp32 summation order).

    Measured with MKL on the 2-core dev box (fp32, 2 threads, batch 8, weights streamed from
    memory): the 49152×576 tied LM head 16.1 → 7.8 ms, 1536×576 (gate/up, ×30) 10.5 → 8.0 ms,
    576×576 (q/o, ×30) 4.0 → 3.0 ms; 192×576 even and 576×1536 (down) slower (8.5 → 11.9 ms),
    so those keep ``F.linear``. Modules that already carry an instance ``forward`` are left alone.

    Inputs of more rows go to ``F.linear`` contiguous: a prefill's last-position slice
    (``logits_to_keep=1``: (B, 1, d) with the row stride of all T positions) sent to the bf16 LM
    head as a view costs what the head over every position would (oneDNN, torch 2.13, AVX512-BF16:
    +55 MB per row at T = 130, 20 rows +1.1 GB and seconds of compute); copied, 20 × 576 values.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    patched = [
        m
        for m in base.modules()
        if type(m) is torch.nn.Linear and m.out_features >= m.in_features and "forward" not in m.__dict__
    ]
    for module in patched:
        module.forward = _skinny_forward(module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward


class BufferLayer(DynamicLayer):
    """One layer's K/V cache in preallocated buffers (B, H, capacity, D), written in place.

    ``keys`` / ``values`` are views of the first T filled positions, so ``transformers``'
    masks and attention see a cache of length T exactly as with ``DynamicLayer``.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        self.device = key_states.device
        self._k = torch.empty(b, h, self.capacity, d, dtype=key_states.dtype, device=self.device)
        self._v = torch.empty(b, h, self.capacity, value_states.shape[-1], dtype=value_states.dtype, device=self.device)
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write (B, H, t, D) new states after the T cached ones; return views of all T + t."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self.length, self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV buffer holds {self.capacity} positions; {end} were written")
        self._k[:, :, start:end].copy_(key_states)
        self._v[:, :, start:end].copy_(value_states)
        self.length = end
        self.keys, self.values = self._k[:, :, :end], self._v[:, :, :end]
        return self.keys, self.values

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only batch rows ``rows`` (R,) long (a copy of their filled positions)."""
        if self.is_initialized:
            self._k = self._k.index_select(0, rows)
            self._v = self._v.index_select(0, rows)
            self.keys, self.values = self._k[:, :, : self.length], self._v[:, :, : self.length]

    def get_max_length(self) -> int:
        return self.capacity


def buffer_cache(model: CausalLM, capacity: int) -> Cache:
    """A ``transformers`` cache of :class:`BufferLayer`, one per decoder layer of ``model``."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return Cache(layers=[BufferLayer(capacity) for _ in range(config.num_hidden_layers)])


def top_p_filter(scores: torch.Tensor, tail: float | torch.Tensor) -> torch.Tensor:
    """(R, V) float ``scores`` with the top-p tail set to -inf (nucleus sampling, Holtzman et al.
    2019): the tokens, least probable first, whose cumulative softmax mass is <= ``tail`` (1 - p, a
    float or a (1,) tensor), the most probable token always kept. A new tensor; ``scores`` is unchanged."""
    ordered, index = torch.sort(scores, descending=False)
    drop = ordered.softmax(dim=-1).cumsum(dim=-1) <= tail
    drop[..., -1:] = False
    return scores.masked_fill(drop.scatter(1, index, drop), -float("inf"))


def choose_tokens(
    logits: torch.Tensor, rows: torch.Tensor, total: int, sampling: Sampling, generator: torch.Generator | None = None
) -> torch.Tensor:
    """The next token of each running row from its last-position logits, as ``sampling`` says
    (its ``greedy``, ``temperature`` and ``top_p``).

    Shapes: logits (R, V) float of the running rows, ``rows`` (R,) long their index among the
    batch's ``total`` rows; returns (R,) long. Greedy: argmax. Else ``generate``'s sampling:
    logits / temperature (> 0), top-p (0 < p <= 1: the smallest set of tokens with probability
    mass >= p, at least one kept), softmax, then ``torch.multinomial``'s own draw for one
    sample, argmax(p / q) with q ~ Exp(1) (total, V) from ``generator`` (drawn on the generator's
    device, then moved to the logits'; None: the default generator of the logits' device). Noise is drawn for all ``total`` rows every step, so a row draws the same
    tokens whether or not other rows have ended (and as ``generate`` with ``multinomial``).
    """
    if sampling.greedy:
        return logits.argmax(dim=-1)
    temperature, top_p = sampling.temperature, sampling.top_p
    scores = logits.float() / temperature if temperature != 1.0 else logits.float()
    if top_p < 1.0:
        scores = top_p_filter(scores, 1 - top_p)
    where = scores.device if generator is None else generator.device  # a generator draws on its own device
    noise = torch.empty(total, scores.shape[-1], device=where).exponential_(1, generator=generator).to(scores.device)
    noise = noise if len(rows) == total else noise[rows]
    return (scores.softmax(dim=-1) / noise).argmax(dim=-1)


class Decoder:
    """One left-padded batch held in a :class:`BufferLayer` cache: prefill once, then decode
    one or several segments, with text forced in between (:mod:`evolora.generation.segments`).

    A row's context is the cache slots it attends (``mask``, (B, capacity)) and ``fed`` (B,),
    its number of context tokens (the RoPE position of its next one). Tokens a segment drops
    (an EOS mid-row, a cut stop string, pads after the row ended) are masked out of the
    cache, not recomputed: exactly the context a fresh prefill of the kept tokens would see.

    Args:
        model, input_ids, attention, names: as :func:`decode`.
        capacity: cache positions, >= T_p + every token fed later.
        context: ``names -> context manager`` around each forward (routing); re-entered for
            the running rows when the batch shrinks.
    """

    def __init__(
        self,
        model: CausalLM,
        input_ids: torch.Tensor,
        attention: torch.Tensor,
        names: list[str],
        *,
        capacity: int,
        context: Callable[[list[str]], ContextManager],
    ) -> None:
        n, width = input_ids.shape
        self.device = device = input_ids.device  # the model's: the batch, masks, rows and cache live there
        self.model, self.context, self.cache = model, context, buffer_cache(model, capacity)
        self.mask = torch.zeros(n, capacity, dtype=torch.long, device=device)
        self.mask[:, :width] = attention
        self.fed, self.length, self.total = attention.sum(-1), width, n
        self.rows, self.names = torch.arange(n, device=device), list(names)
        self.tokens = [[t for t, a in zip(r, m) if a] for r, m in zip(input_ids.tolist(), attention.tolist())]
        self.slots = [list(range(width - len(t), width)) for t in self.tokens]  # row -> its context slots
        self.segment = (width, 0)  # (first slot, tokens chosen) of the last run
        self.fast, self.stack = contextlib.ExitStack(), contextlib.ExitStack()
        try:
            self.fast.enter_context(skinny_linears(model))
            self.logits = self._prefill(input_ids, attention)
            self.stack.enter_context(context(self.names))
        except BaseException:
            self.close()
            raise

    def _prefill(self, input_ids, attention) -> torch.Tensor:
        """(B, V) last-position logits of the prompts. Rows with the same prompt and adapter (a
        student's samples of one problem) run once and their cache is copied."""
        keys = [(tuple(row), name) for row, name in zip(input_ids.tolist(), self.names)]
        first = {key: i for i, key in reversed(list(enumerate(keys)))}
        unique = sorted(set(first.values()))
        position = (attention.cumsum(-1) - 1).masked_fill(attention == 0, 0)
        with self.context([self.names[i] for i in unique]):
            logits = self.model(
                input_ids=input_ids[unique],
                attention_mask=attention[unique],
                position_ids=position[unique],
                cache=self.cache,
                use_cache=True,
                logits_to_keep=1,
            ).logits[:, -1]
        if len(unique) < len(keys):
            index = torch.tensor([unique.index(first[key]) for key in keys], device=self.device)
            for layer in self.cache.layers:
                layer.keep(index)
            logits = logits[index]
        return logits

    def _step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed (R, t) tokens of the running rows after the cached slots; (R, V) last-position logits."""
        t = tokens.shape[1]
        self.mask[:, self.length : self.length + t] = 1
        position = self.fed[:, None] + torch.arange(t, device=self.device)
        logits = self.model(
            input_ids=tokens,
            attention_mask=self.mask[:, : self.length + t],
            position_ids=position,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits[:, -1]
        self.length, self.fed = self.length + t, self.fed + t
        return logits

    def _keep(self, alive: torch.Tensor) -> None:
        """Cut to the running rows where ``alive`` (R,) bool: cache, masks, routing."""
        local = torch.nonzero(alive).flatten()
        for layer in self.cache.layers:
            layer.keep(local)
        self.mask, self.fed, self.rows, self.logits = self.mask[local], self.fed[local], self.rows[local], None
        kept = local.tolist()
        self.names = [self.names[i] for i in kept]
        self.tokens, self.slots = [self.tokens[i] for i in kept], [self.slots[i] for i in kept]
        self.stack.close()
        self.stack = contextlib.ExitStack()
        self.stack.enter_context(self.context(self.names))

    def run(
        self,
        sampling: Sampling,
        *,
        eos: torch.Tensor,
        pad_id: int,
        generator: torch.Generator | None = None,
        stopped=None,
        min_new_tokens: int = 0,
        compact: bool = True,
    ) -> torch.Tensor:
        """Decode one segment: (B, t) chosen tokens of every row (pads after a row ended),
        t <= ``sampling.max_new_tokens``.

        ``sampling``, ``generator``, ``stopped``, ``min_new_tokens``: as :func:`decode`; ``compact``:
        drop ended rows from the batch (only for the last segment: the others go on with :meth:`extend`).
        """
        max_new_tokens = sampling.max_new_tokens
        out = torch.full((self.total, max_new_tokens), pad_id, dtype=torch.long, device=self.device)
        done = torch.zeros(len(self.rows), dtype=torch.bool, device=self.device)
        self.segment = (self.length, 0)
        for step in range(max_new_tokens):
            if step < min_new_tokens:
                self.logits[:, eos] = -float("inf")
            token = choose_tokens(self.logits, self.rows, self.total, sampling, generator).masked_fill(done, pad_id)
            out[self.rows, step] = token
            done |= torch.isin(token, eos)
            if isinstance(stopped, FlaggedStop):  # decode only the rows whose new token could end a stop
                check = flagged_rows(stopped, token, done)
                if len(check):
                    done[check] |= stopped(out[self.rows[check], : step + 1], self.rows[check], step + 1)
            elif stopped is not None:
                done |= stopped(out[self.rows, : step + 1], self.rows, step + 1)
            self.segment = (self.segment[0], step + 1)
            if step + 1 == max_new_tokens or bool(done.all()):
                return out[:, : step + 1]
            if compact and int(done.sum()) >= max(1.0, COMPACT_AT * len(done)):
                alive = ~done
                token, done = token[alive], done[alive]
                self._keep(alive)
            self.logits = self._step(token[:, None])
        return out

    def extend(self, kept: list[int], out: torch.Tensor, forced: list[int]) -> None:
        """Continue every row after the first ``kept[i]`` tokens of its last segment ``out[i]``
        ((B, t), as :meth:`run` returned it, no rows dropped), followed by ``forced`` tokens.

        The segment's other slots are masked out; the tokens still to feed (a kept token that was
        chosen last, then ``forced``) go in one forward, all rows alike in count: a row with
        fewer re-feeds its last context token (its old slot masked out), so >= 1 token is fed.
        """
        start, chosen = self.segment
        pending = []
        for i, row in enumerate(self.rows.tolist()):
            valid = min(kept[row], chosen - 1)  # chosen token j sits in slot start + j, the last one unfed
            self.mask[i, start + valid : self.length] = 0
            self.tokens[i] += out[row, :valid].tolist()
            self.slots[i] += list(range(start, start + valid))
            self.fed[i] += valid - (chosen - 1)
            pending.append(out[row, valid : kept[row]].tolist() + list(forced))
        count = max(1, max(len(p) for p in pending))
        for i, tail in enumerate(pending):
            while len(tail) < count:  # re-feed the last context token
                self.mask[i, self.slots[i].pop()] = 0
                tail.insert(0, self.tokens[i].pop())
                self.fed[i] -= 1
            self.tokens[i] += tail
            self.slots[i] += list(range(self.length, self.length + count))
        self.logits = self._step(torch.tensor(pending, dtype=torch.long, device=self.device))

    def close(self) -> None:
        """Leave the routing context and restore the linear layers."""
        self.stack.close()
        self.fast.close()


def decode(
    model: CausalLM,
    input_ids: torch.Tensor,
    attention: torch.Tensor,
    names: list[str],
    sampling: Sampling,
    *,
    eos_ids: set[int],
    pad_id: int,
    generator: torch.Generator | None = None,
    context: Callable[[list[str]], ContextManager] | None = None,
    stopped: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor] | None = None,
    min_new_tokens: int = 0,
) -> torch.Tensor:
    """Generate up to ``max_new_tokens`` per row of one left-padded batch (one segment).

    Args:
        model: a causal LM (a PEFT model or its base) taking ``cache`` / ``logits_to_keep``.
        input_ids, attention: (B, T_p) long, left padding (attention 0 on pads).
        names: B adapter names, passed to ``context`` (routing) for the running rows.
        sampling: how tokens are chosen (:func:`choose_tokens`) and ``max_new_tokens``, the cap per row
            (its ``stop`` is ``stopped``'s business).
        eos_ids: tokens that end a row (kept in the output); pad_id fills ended rows.
        generator: the sampling RNG (None: the default generator of the model's device).
        context: ``names -> context manager`` entered around every forward of those rows
            (re-entered when the batch shrinks); None: no routing.
        stopped: ``(generated (R, t) long, rows (R,) long, t) -> (R,) bool``: rows that wrote a stop string;
            a :class:`~evolora.generation.kernels.stop_mask.FlaggedStop` is called only for the rows
            whose new token its mask flags (the same ends).
        min_new_tokens: EOS is masked out before this many tokens (``generate``'s rule).

    Returns:
        (B, t) long generated tokens, t <= ``max_new_tokens`` (the steps run); a row holds
        ``pad_id`` after its EOS or stop.

    """
    decoder = Decoder(
        model,
        input_ids,
        attention,
        names,
        capacity=input_ids.shape[1] + sampling.max_new_tokens,
        context=context or (lambda _: contextlib.nullcontext()),
    )
    try:
        return decoder.run(
            sampling,
            eos=torch.tensor(sorted(eos_ids), dtype=torch.long, device=input_ids.device),
            pad_id=pad_id,
            generator=generator,
            stopped=stopped,
            min_new_tokens=min_new_tokens,
        )
    finally:
        decoder.close()
