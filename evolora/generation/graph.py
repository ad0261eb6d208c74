"""The graph engine's decode: a static KV cache and one fixed-shape step per batch-size bucket.

A decode call runs in three parts:

1. the prefill, outside any graph, one per distinct (prompt, adapter): with ``static_prefill`` (the
   CUDA default) through the static step's own weights and stacked LoRA over every prompt position,
   writing the static cache directly (:func:`evolora.generation.static_prefill.prefill_static`, no
   ``transformers`` forward, no hooks); otherwise the eager engine's
   (:class:`evolora.generation.decode.Decoder`, routed LoRA hooks), its K/V copied into the static
   cache. The first token is chosen from its logits by :func:`choose_tokens`;
2. steps of :func:`evolora.generation.static_step.decode_step` plus the sampling, on buffers at
   fixed addresses: rows fill the first R slots of a bucket (:data:`BUCKETS`), ended rows stay in
   it masked (their tokens are ``pad_id``), and the step attends a window of the cache rounded up
   to :data:`WINDOW` columns. On CUDA each (bucket, window, sampling) step is captured once in a
   ``torch.cuda.CUDAGraph`` and replayed; on the CPU the same step runs uncaptured (or compiled);
3. every ``check_every`` steps the host reads which rows ended, runs the stop-string check over
   the steps since the last check (tokens after a row's stop become pads;
   :mod:`evolora.generation.host_check`: only the new columns copied, in one sync, and with a
   :class:`~evolora.generation.kernels.stop_mask.FlaggedStop` only the rows whose new token could end
   a stop decoded), and when the running rows fit a smaller bucket, moves them to the front of the
   buffers and snaps to it. On CUDA (``overlap``) the check's copies are enqueued first, then the
   next ``check_every`` steps, and only then does the host wait for the copies and check: the GPU
   steps while the host checks, and the check's results (ended rows, a smaller bucket) apply one
   interval later (rows that ended in between are stepped masked, their tokens pads, as between
   checks; a call runs up to 2·``check_every`` − 1 steps past its last row's end, not ``check_every`` − 1).

Why manual capture rather than ``torch.compile(mode="reduce-overhead")``: reduce-overhead
re-records its graphs when input addresses or shapes change and copies inputs into its own
static buffers, has failure modes with in-place mutation of graph inputs (the KV cache, the
token buffer) and with dynamic shapes, and hides when a recapture happens. Here every buffer is
allocated once by the engine, mutated in place, and each capture is explicit and keyed by the
only values that change its shape. The RNG is the engine's own device generator, registered with
every graph, its state copied from and back to the caller's generator around each call.

Equality with the eager engine (fp32): the eager prefill and the first token are the eager engine's
(the static prefill computes the same cache columns and logits up to fp32 summation order), and
the step computes the logits with the same modules up to fp32 summation order, so greedy
tokens are equal. Sampling draws ``exponential_`` noise over all rows of the call every step, as
:func:`choose_tokens` does (a row draws the same whether or not others ended). Uncaptured (the
CPU), the draw is (B, V) for the B rows of the call, as the eager engine's: sampled tokens are
equal seed for seed for any B (tested). Captured, the draw must have a fixed shape per graph, so
it is (bucket(B), V): the same values as the eager engine's draw when B is a bucket size (the
generator advances by the draw's size), another draw of the same distribution otherwise. Keying
graphs by B instead would capture a graph (and keep a noise buffer) per distinct batch size.

Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-3; vLLM V1 / nano-vllm bucketed graph capture.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from evolora.generation.decode import Decoder, choose_tokens
from evolora.generation.host_check import HostCheck, to_device
from evolora.generation.kernels.stop_mask import FlaggedStop
from evolora.generation.routed import BASE, routed
from evolora.generation.static_cache import StaticBuffers, step
from evolora.generation.static_prefill import prefill_static
from evolora.generation.static_step import StaticWeights
from evolora.generation.types import Sampling

if TYPE_CHECKING:
    from evolora.generation.types import RoutedBank

BUCKETS = (1, 2, 4, 8, 16, 32) + tuple(range(64, 513, 32))
"""Batch sizes with a captured step: a batch runs in the smallest bucket that holds its rows."""

WINDOW = 128
"""The step attends cache columns [0, k·WINDOW): one captured step per window the call reaches."""

CHECK_EVERY = 8
"""Steps between host checks of ended rows and stop strings (the only syncs of the loop)."""


def bucket(rows: int) -> int:
    """The smallest bucket of :data:`BUCKETS` holding ``rows`` (1..512).

    Raises:
        ValueError: ``rows`` outside 1..512.
    """
    for size in BUCKETS:
        if size >= rows:
            return size
    raise ValueError(f"the graph engine decodes 1 to {BUCKETS[-1]} rows per call, got {rows}")


def shifted(stopped: Callable, offset: int) -> Callable:
    """``stopped`` for rows numbered from ``offset`` (a chunk of a larger call); a
    :class:`~evolora.generation.kernels.stop_mask.FlaggedStop` keeps its mask."""
    if isinstance(stopped, FlaggedStop):
        return stopped.shifted(offset)
    return lambda generated, rows, t: stopped(generated, rows + offset, t)


class GraphDecoder:
    """Static-shape decode over an :class:`evolora.bank.local.AdapterBank`'s model and adapters.

    Args:
        bank: the adapter bank (its model a ``llama``/``mistral``/``qwen2``/``qwen3`` causal LM).
        check_every: steps between host checks of ended rows and stop strings (>= 1).
        capture: capture each step in a CUDA graph (default: on CUDA); False runs it uncaptured.
        compile: run the step through ``torch.compile`` (uncaptured; for the CPU).
        overlap: enqueue the next ``check_every`` steps before the host reads a check's copies, so the
            GPU steps while the host checks (default: on CUDA; uncaptured steps run at once, so on the
            CPU it only delays the check's results by one interval).
        static_prefill: prefill through the static step's weights (:mod:`evolora.generation.static_prefill`)
            rather than the eager decoder with routed hooks, the reference (default: on CUDA).

    Raises:
        ValueError: an unsupported model type, or ``check_every < 1``.
    """

    def __init__(
        self,
        bank: RoutedBank,
        *,
        check_every: int = CHECK_EVERY,
        capture: bool | None = None,
        compile: bool = False,
        overlap: bool | None = None,
        static_prefill: bool | None = None,
    ) -> None:
        if check_every < 1:
            raise ValueError(f"check_every must be >= 1, got {check_every}")
        self.bank, self.check_every = bank, check_every
        self.weights = StaticWeights(bank)
        device = self.weights.device
        self.capture = device.type == "cuda" if capture is None else capture
        if self.capture and device.type != "cuda":
            raise ValueError("CUDA graph capture needs the model on a CUDA device")
        self.compile = compile
        self.overlap = device.type == "cuda" if overlap is None else overlap
        self.static_prefill = device.type == "cuda" if static_prefill is None else static_prefill
        self.buffers: StaticBuffers | None = None
        self.steps: dict[tuple, Callable[[], None]] = {}
        self.rng = torch.Generator(device=device) if self.capture else None
        self.pool = torch.cuda.graph_pool_handle() if self.capture else None

    def refresh(self, slots: list[str]) -> None:
        """Copy the named bank slots' current factors into the stacked buffers in place (after an
        update or a slot overwrite); no step is recaptured.

        Raises:
            KeyError: an unknown slot.
        """
        unknown = [s for s in slots if s not in self.bank.slots]
        if unknown:
            raise KeyError(f"unknown adapter slots {unknown}; slots are {self.bank.slots}")
        self.weights.refresh([self.bank.slots.index(s) for s in slots])

    # -- buffers and captured steps ------------------------------------------------------------
    def _buffers_for(self, slots: int, capacity: int) -> StaticBuffers:
        b = self.buffers
        if b is None or b.slots < slots or b.capacity < capacity:
            slots = max(slots, b.slots if b else 0)
            capacity = max(capacity, b.capacity if b else 0)
            self.buffers, self.steps = None, {}  # free the old buffers (and graphs) first
            self.buffers = b = StaticBuffers(self.weights, slots, capacity)
        return b

    def _runner(
        self, rows: int, window: int, greedy: bool, top_p: bool, total: int, generator: torch.Generator | None
    ) -> Callable[[], None]:
        key = (rows, window, greedy, top_p, total)
        if self.capture:
            if key not in self.steps:
                self.steps[key] = self._captured(rows, window, greedy, top_p, total)
            return self.steps[key]
        fn = self.steps.get(key)
        if fn is None:
            fn = step
            if self.compile:
                fn = torch.compile(step, dynamic=False, fullgraph=False)
            self.steps[key] = fn
        w, b = self.weights, self.buffers
        return lambda: fn(w, b, rows, window, greedy=greedy, top_p=top_p, total=total, generator=generator)

    def _captured(self, rows: int, window: int, greedy: bool, top_p: bool, total: int) -> Callable[[], None]:
        """Warm the step up on a side stream (its writes undone), then capture it."""
        w, b, rng = self.weights, self.buffers, self.rng
        run = lambda: step(w, b, rows, window, greedy=greedy, top_p=top_p, total=total, generator=rng)  # noqa: E731
        saved = [t.clone() for t in (b.position, b.last, b.done, b.column, b.step)]
        state = rng.get_state()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            run()
        torch.cuda.current_stream().wait_stream(stream)
        for target, value in zip((b.position, b.last, b.done, b.column, b.step), saved):
            target.copy_(value)
        rng.set_state(state)
        graph = torch.cuda.CUDAGraph()
        if not greedy:
            graph.register_generator_state(rng)
        with torch.cuda.graph(graph, pool=self.pool):
            run()
        return graph.replay

    # -- one call ------------------------------------------------------------------------------
    @torch.no_grad()
    def decode(
        self,
        input_ids: torch.Tensor,
        attention: torch.Tensor,
        names: list[str],
        sampling: Sampling,
        *,
        eos_ids: set[int],
        pad_id: int,
        generator: torch.Generator | None,
        stopped: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor] | None = None,
        min_new_tokens: int = 0,
    ) -> torch.Tensor:
        """Generate up to ``sampling.max_new_tokens`` per row of one left-padded batch.

        Same arguments and return as :func:`evolora.generation.decode.decode`:
        ``input_ids``/``attention`` (B, T_p) long, left padded (more than 512 rows run in chunks of
        512: greedy tokens as one batch, sampled ones from per-chunk draws); ``names`` B adapter
        slots (or ``"__base__"``); ``sampling`` as :func:`choose_tokens` reads it; ``generator`` on
        the model's device (None: its default generator).

        Returns:
            (B, t) long, t <= ``sampling.max_new_tokens`` (up to the step where the last row ended);
            ``pad_id`` after a row's EOS or stop string.

        Raises:
            ValueError: a generator on another device.
            KeyError: an unknown adapter name.
        """
        max_new_tokens, greedy = sampling.max_new_tokens, sampling.greedy
        total, width = input_ids.shape
        if total > BUCKETS[-1]:  # in chunks of the largest bucket, padded to the longest
            return self._chunked(
                input_ids,
                attention,
                names,
                sampling,
                stopped,
                eos_ids=eos_ids,
                pad_id=pad_id,
                generator=generator,
                min_new_tokens=min_new_tokens,
            )
        size = bucket(total)
        w = self.weights
        if generator is not None and generator.device.type != w.device.type:
            raise ValueError(f"the generator is on {generator.device}, the model on {w.device}")
        unknown = sorted({n for n in names if n != BASE and n not in self.bank.slots})
        if unknown:
            raise KeyError(f"unknown adapters {unknown}; slots are {self.bank.slots}")
        capacity = -(-(width + max_new_tokens) // WINDOW) * WINDOW
        b = self._buffers_for(size, capacity)
        eos = torch.tensor(sorted(eos_ids), dtype=torch.long, device=w.device)
        logits = self._prefill(b, input_ids, attention, names, size)

        self._first(b, logits, eos, sampling, min_new_tokens=min_new_tokens, pad_id=pad_id, generator=generator)
        use_top_p = not greedy and sampling.top_p < 1.0
        draws = total if not self.capture else size  # noise rows: see the module docstring
        if not greedy and draws not in b.noise:
            b.noise[draws] = torch.empty(draws, w.vocab, dtype=torch.float32, device=w.device)
        rng = self._enter_rng(generator) if (self.capture and not greedy) else generator

        def advance(steps: int, ahead: int, rows: int) -> int:
            """Step slots [0, rows) on from ``steps`` to ``ahead`` tokens; returns the tokens so far."""
            for made in range(steps, ahead):
                window = min(b.capacity, -(-(width + made) // WINDOW) * WINDOW)
                self._runner(rows, window, greedy, use_top_p, 0 if greedy else draws, rng)()
            return max(steps, ahead)

        rows, checked, steps = size, 0, 1
        host = HostCheck(total, max_new_tokens, eos_ids, stopped)
        try:
            while True:  # at a check: steps == 1, a multiple of check_every, or max_new_tokens
                pending = host.start(b, rows, checked, steps)
                checked = steps
                ahead = min(max_new_tokens, (steps // self.check_every + 1) * self.check_every)
                if self.overlap:  # the next steps enqueued before the host reads this check
                    steps = advance(steps, ahead, rows)
                rows = self._check(b, rows, pending, host, pad_id)
                if rows == 0 or checked == max_new_tokens:
                    break
                steps = advance(steps, ahead, rows)
        finally:
            if rng is not None and rng is self.rng:
                self._leave_rng(generator)
        last = max((e for e in host.ends if e is not None), default=steps - 1)
        length = steps if any(e is None for e in host.ends) else last + 1
        return b.out[:total, :length].clone()

    def _chunked(
        self, input_ids, attention, names, sampling: Sampling, stopped, *, pad_id: int, **options
    ) -> torch.Tensor:
        """:meth:`decode` of more rows than the largest bucket, chunk by chunk, padded to the longest."""
        parts, size = [], BUCKETS[-1]
        for start in range(0, input_ids.shape[0], size):
            tail = None if stopped is None else shifted(stopped, start)
            parts.append(
                self.decode(
                    input_ids[start : start + size],
                    attention[start : start + size],
                    names[start : start + size],
                    sampling,
                    stopped=tail,
                    pad_id=pad_id,
                    **options,
                )
            )
        length = max(p.shape[1] for p in parts)
        return torch.cat([torch.nn.functional.pad(p, (0, length - p.shape[1]), value=pad_id) for p in parts])

    @staticmethod
    def _first(
        b: StaticBuffers,
        logits: torch.Tensor,
        eos: torch.Tensor,
        sampling: Sampling,
        *,
        min_new_tokens: int,
        pad_id: int,
        generator,
    ) -> None:
        """The first token from the prefill's (B, V) logits, the eager engine's own choice; the step's settings."""
        total = logits.shape[0]
        if min_new_tokens > 0:
            logits[:, eos] = -float("inf")
        first = choose_tokens(logits, torch.arange(total, device=logits.device), total, sampling, generator)
        b.last[:total] = first
        b.out[:total, 0] = first
        b.done[:total] = torch.isin(first, eos)
        b.eos.zero_()
        b.eos[eos] = True
        b.step.fill_(1)
        b.min_new.fill_(min_new_tokens)
        b.pad.fill_(pad_id)
        b.temperature.fill_(sampling.temperature)
        b.tail.fill_(1 - sampling.top_p)

    def _prefill(self, b: StaticBuffers, input_ids, attention, names, size: int) -> torch.Tensor:
        """Prefill the prompts into the buffers' cache (static or eager, :attr:`static_prefill`); set
        rows, routes, masks. (B, V) logits."""
        total, width = input_ids.shape
        route = torch.tensor([self.bank.slots.index(n) if n != BASE else -1 for n in names], device=b.rows.device)
        if self.static_prefill:
            logits = prefill_static(self.weights, b.kv, input_ids, attention, route)
        else:
            logits = self._eager_prefill(b, input_ids, attention, names)
        b.valid.zero_()
        b.valid[:total, :width] = attention.bool()
        b.position[:total] = attention.sum(-1)
        b.column.fill_(width)
        b.rows.fill_(b.slots)
        b.rows[:total] = torch.arange(total, device=b.rows.device)
        b.noise_rows.zero_()
        b.noise_rows[:total] = torch.arange(total, device=b.rows.device)
        b.done.fill_(True)
        b.onehot.zero_()
        adapted = torch.nonzero(route >= 0).flatten()
        b.onehot[adapted, route[adapted]] = 1.0
        return logits

    def _eager_prefill(self, b: StaticBuffers, input_ids, attention, names) -> torch.Tensor:
        """The eager decoder's prefill (routed LoRA hooks), its K/V copied into the buffers. (B, V) logits."""
        total, width = input_ids.shape
        decoder = Decoder(
            self.bank.model,
            input_ids,
            attention,
            list(names),
            capacity=width,
            context=lambda rows: routed(self.bank, rows),
        )
        decoder.close()
        for i, layer in enumerate(decoder.cache.layers):
            b.keys[i, :total, :, :width] = layer.keys
            b.values[i, :total, :, :width] = layer.values
        return decoder.logits

    def _check(self, b: StaticBuffers, rows: int, pending: tuple, host: HostCheck, pad_id: int) -> int:
        """Finish the host check ``pending`` (:class:`evolora.generation.host_check.HostCheck`: EOS ends,
        stop strings over its steps), mark the rows it ended, snap the bucket. The steps enqueued since
        it started run first on the device: rows that ended there stay, masked, until the next check.
        Returns the slots still stepped (0: every row ended by the checked step)."""
        done = host.finish(pending, b, pad_id)
        if host.stopped is not None:
            b.done[:rows] |= to_device(done, b.done.device)
        alive = torch.nonzero(~done).flatten()
        if len(alive) == 0:
            return 0
        size = bucket(len(alive))
        if size < rows:
            b.compact(to_device(alive, b.rows.device), size)
            return size
        return rows

    def _enter_rng(self, generator: torch.Generator | None) -> torch.Generator:
        source = generator if generator is not None else torch.cuda.default_generators[self.weights.device.index or 0]
        self.rng.set_state(source.get_state())
        return self.rng

    def _leave_rng(self, generator: torch.Generator | None) -> None:
        source = generator if generator is not None else torch.cuda.default_generators[self.weights.device.index or 0]
        source.set_state(self.rng.get_state())
