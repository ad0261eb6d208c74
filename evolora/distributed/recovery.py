"""A run that loses a Ray worker: the errors, and repeating the step from the last checkpoint.

:class:`evolora.distributed.sharded_bank.ShardedBank` raises :class:`WorkerLost` when a worker dies during a
call; :func:`run_step_with_recovery` (what :meth:`evolora.run.Run.run_step` calls) restores every
worker from the checkpoint of the previous step and repeats the step, or raises
:class:`ClusterLost` naming the run directory to ``--resume``. Source: PopuLoRA (arXiv
2605.16727) §2 (one step of the loop, seeded from (seed, step), so a repeat gives the same records).
"""

from __future__ import annotations

from typing import Callable

from evolora.checkpoint import latest_checkpoint

MAX_RESTARTS = 3
"""Restarts Ray gives one worker (``max_restarts``), and attempts at one step after losing one."""

RESTART_TIMEOUT_S = 300.0
"""Seconds to wait for a restarted worker to answer before the cluster counts as lost."""


class WorkerLost(RuntimeError):
    """A Ray worker died or was restarted during a call; the step can be repeated from a checkpoint."""


class ClusterLost(WorkerLost):
    """The workers cannot be restored; the message names the run directory to ``--resume``
    (a :class:`WorkerLost` that no repeat of the step can repair)."""


def run_step_with_recovery(run, step: Callable[[], tuple]) -> tuple:
    """``step()``, and after a lost worker: restore every worker from the last checkpoint and
    repeat it (at most :data:`MAX_RESTARTS` times). The step seeds everything from (seed, step),
    so the repeat gives the records the undisturbed step would have given (one step of
    PopuLoRA, arXiv 2605.16727 §2). In-process runs never lose a worker: this is ``step()``.

    Raises:
        ClusterLost: no checkpoint of the current step to repeat from, the workers do not come
            back, or the step keeps failing; the message names ``run.out_dir`` to ``--resume``.
    """
    for attempt in range(MAX_RESTARTS + 1):
        try:
            return step()
        except WorkerLost as error:
            if attempt == MAX_RESTARTS:
                raise _lost(run, f"the step failed {attempt + 1} times ({error})") from error
            path = latest_checkpoint(run.out_dir)
            if path is None or path.name != f"step_{run.step:06d}":
                raise _lost(run, f"{error}, and there is no checkpoint of step {run.step} to repeat "
                            f"step {run.step + 1} from (run.checkpoint_every=1 keeps one)") from error
            try:
                run.bank.reconnect()
                run.load_checkpoint(path)
            except (WorkerLost, ClusterLost) as again:
                raise _lost(run, str(again)) from again
    raise AssertionError("unreachable")


def _lost(run, why: str) -> ClusterLost:
    return ClusterLost(f"lost the Ray cluster at step {run.step + 1}: {why}. The last checkpoint in {run.out_dir} "
                       f"is intact; continue with: evolora evolve --resume {run.out_dir}")
