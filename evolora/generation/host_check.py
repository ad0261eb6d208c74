"""The graph engine's host check: which rows ended, from the few steps since the last check.

Every ``check_every`` steps :class:`evolora.generation.graph.GraphDecoder` asks the host which rows
ended. :class:`HostCheck` keeps the call's tokens on the host and copies only the columns written
since the last check, with the rows' slot map and ``done`` flags (:meth:`HostCheck.start`: on CUDA
into pinned memory, non-blocking, with one event; on the CPU plain copies). The decoder enqueues the
next steps before it waits for that event and reads the copies (:meth:`HostCheck.finish`), so the
GPU runs while the host checks:

* a row's first EOS among the new columns ends it there;
* the stop strings are checked over the new steps by
  :func:`evolora.generation.kernels.stop_mask.flagged_stop_ends`: with a
  :class:`~evolora.generation.kernels.stop_mask.FlaggedStop`, a row is decoded at step t only when its
  token t − 1 is flagged by the stop mask (gathered here on the host copy, as EOS is); with any
  other check, every live row at every step, as before.

The ends equal those of checking every live row's tail at every step (tests/test_stops.py).
Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-3 (rollouts with stop strings).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from evolora.generation.kernels.stop_mask import FlaggedStop, flagged_stop_ends

if TYPE_CHECKING:
    from collections.abc import Callable

    from evolora.generation.static_cache import StaticBuffers


def to_host(tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor], torch.cuda.Event | None]:
    """CPU copies of ``tensors`` and the event to wait on before reading them: from CUDA into pinned
    memory, non-blocking, one event recorded after the copies (one sync however many tensors, and
    work enqueued later runs on); from the CPU, plain copies and no event."""
    if not tensors or tensors[0].device.type != "cuda":
        return [t.clone() if t.device.type == "cpu" else t.cpu() for t in tensors], None
    copies = [torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True) for t in tensors]
    for copy, t in zip(copies, tensors):
        copy.copy_(t, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return copies, event


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` (CPU) on ``device``: through pinned memory, non-blocking, on CUDA (the host does not
    wait for the replays already enqueued); a plain copy elsewhere."""
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


class HostCheck:
    """The host side of one decode call of ``total`` rows and up to ``steps`` new tokens.

    Args:
        total: B, the call's rows; steps: the most tokens per row.
        eos_ids: the tokens that end a row.
        stopped: the stop check (None: no stop strings).
    """

    def __init__(self, total: int, steps: int, eos_ids: set[int], stopped: Callable | None) -> None:
        self.out = torch.zeros(total, steps, dtype=torch.long, device="cpu")
        self.flags = torch.zeros(total, steps, dtype=torch.bool, device="cpu") if stopped is not None else None
        self.eos = torch.tensor(sorted(eos_ids), dtype=torch.long, device="cpu")
        self.stopped = stopped
        self.ends: list[int | None] = [None] * total  # the step of each row's EOS or stop

    def start(self, b: StaticBuffers, rows: int, checked: int, steps: int) -> tuple:
        """Enqueue the copies of steps (checked, steps] of the buffers' rows (the tokens, the slots' rows,
        ``done``); returns what :meth:`finish` reads. Steps enqueued after this do not change it."""
        copies, event = to_host([b.out[: self.out.shape[0], checked:steps], b.rows[:rows], b.done[:rows]])
        return copies, event, checked, steps

    def finish(self, pending: tuple, b: StaticBuffers, pad_id: int) -> torch.Tensor:
        """Wait for :meth:`start`'s copies; set :attr:`ends`; pad the device's tokens after a stop
        (``b.out``, enqueued after any steps in flight); returns the (rows,) bool ``done`` of the
        stepped slots as copied, with the rows the stop strings ended."""
        (new, slot_rows, done), event, checked, steps = pending
        if event is not None:
            event.synchronize()
        total = self.out.shape[0]
        self.out[:, checked:steps] = new
        hits = torch.isin(new, self.eos)
        first, has = hits.int().argmax(dim=1).tolist(), hits.any(dim=1).tolist()
        for i in range(total):
            if self.ends[i] is None and has[i]:
                self.ends[i] = checked + first[i]
        if self.stopped is None:
            return done
        mask = self.stopped.mask if isinstance(self.stopped, FlaggedStop) else None
        self.flags[:, checked:steps] = True if mask is None else mask[new]
        for i, t in flagged_stop_ends(self.out, self.flags, self.stopped, checked, steps, self.ends):
            b.out[i, t:] = pad_id
            self.out[i, t:steps] = pad_id
        ended = [self.ends[int(r)] is not None if r < total else True for r in slot_rows.tolist()]
        return done | torch.tensor(ended, dtype=torch.bool, device="cpu")

    def check(self, b: StaticBuffers, rows: int, checked: int, steps: int, pad_id: int) -> torch.Tensor:
        """:meth:`start` then :meth:`finish`: the check of steps (checked, steps] with nothing in flight."""
        return self.finish(self.start(b, rows, checked, steps), b, pad_id)
