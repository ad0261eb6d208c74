"""The graph engine's host check: which rows ended, from the few steps since the last check.

Every ``check_every`` steps :class:`evolora.generation.graph.GraphDecoder` stops feeding the GPU and
asks the host which rows ended. :class:`HostCheck` keeps the call's tokens on the host, copies only
the columns written since the last check (with the rows' slot map and ``done`` flags: on CUDA into
pinned memory, non-blocking, then one event waited on; on the CPU plain copies), and then:

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


def to_host(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """CPU copies of ``tensors``: from CUDA into pinned memory, non-blocking, then one event waited on
    (one sync however many tensors); from the CPU, plain copies."""
    if not tensors or tensors[0].device.type != "cuda":
        return [t.clone() if t.device.type == "cpu" else t.cpu() for t in tensors]
    copies = [torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True) for t in tensors]
    for copy, t in zip(copies, tensors):
        copy.copy_(t, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    event.synchronize()
    return copies


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

    def check(self, b: StaticBuffers, rows: int, checked: int, steps: int, pad_id: int) -> torch.Tensor:
        """Read steps (checked, steps] of the buffers' rows; set :attr:`ends`; pad the device's tokens
        after a stop (``b.out``); returns the (rows,) bool ``done`` of the stepped slots (the device's
        ``done``, with the rows the stop strings ended)."""
        total = self.out.shape[0]
        new, slot_rows, done = to_host([b.out[:total, checked:steps], b.rows[:rows], b.done[:rows]])
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
