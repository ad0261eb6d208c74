"""A run that loses a Ray worker: the errors, and repeating the step from the last checkpoint.

:class:`evolora.distributed.sharded_bank.ShardedBank` raises :class:`WorkerLost` when a worker dies during a
call; :func:`run_step_with_recovery` (what :meth:`evolora.run.Run.run_step` calls) waits for Ray to
restart it (:func:`wait_for_workers`), restores every worker from the newest checkpoint, replays
the steps after it and repeats the step, or raises :class:`ClusterLost` naming the run directory
to ``--resume``. Source: PopuLoRA (arXiv 2605.16727) §2 (one step of the loop, seeded from
(seed, step), so a replay gives the same records).
"""

from __future__ import annotations

import time
from typing import Callable

from evolora.checkpoint import latest_checkpoint
from evolora.user_code import PassesUserCode

MAX_RESTARTS = 3
"""Restarts Ray gives one worker (``max_restarts``), and attempts at one step after losing one."""

RESTART_TIMEOUT_S = 300.0
"""Seconds to wait for a restarted worker to answer before the cluster counts as lost."""

RETRY_S = 0.5
"""Seconds between calls to a worker that Ray is restarting (:func:`wait_for_workers`)."""


class WorkerLost(PassesUserCode, RuntimeError):
    """A Ray worker died or was restarted during a call; the step can be repeated from a checkpoint
    (it goes through a user's play unchanged, :class:`evolora.user_code.PassesUserCode`)."""


class ClusterLost(WorkerLost):
    """The workers cannot be restored; the message names the run directory to ``--resume``
    (a :class:`WorkerLost` that no repeat of the step can repair)."""


def run_step_with_recovery(run, step: Callable[[], tuple]) -> tuple:
    """``step()``, and after a lost worker: restore every worker from the newest checkpoint, replay
    the steps after it that were already logged, and repeat the step (at most :data:`MAX_RESTARTS`
    times). Every step seeds everything from (seed, step), so the replay and the repeat give the
    records the undisturbed run gave (one step of PopuLoRA, arXiv 2605.16727 §2); the replayed
    steps' records are not returned again (their logs are written already). In-process runs never
    lose a worker: this is ``step()``.

    Raises:
        ClusterLost: no checkpoint to restore from, the workers do not come back within
            :data:`RESTART_TIMEOUT_S`, or the step keeps failing; the message names ``run.out_dir``
            to ``--resume``.
    """
    target, counts = run.step + 1, dict(run.log_counts)
    for attempt in range(MAX_RESTARTS + 1):
        try:
            while run.step < target - 1:  # after a restore: the steps since the checkpoint, already logged
                step()
            run.log_counts = dict(counts)  # the logs on disk hold every step before the target
            return step()
        except WorkerLost as error:
            if attempt == MAX_RESTARTS:
                raise _lost(run, f"the step failed {attempt + 1} times ({error})") from error
            path = latest_checkpoint(run.out_dir)
            if path is None or int(path.name.removeprefix("step_")) >= target:
                raise _lost(
                    run,
                    f"{error}, and there is no checkpoint before step {target} to restore the "
                    "workers from (run.checkpoint_every sets how often one is written)",
                ) from error
            try:
                run.bank.reconnect()
                run.load_checkpoint(path)
            except (WorkerLost, ClusterLost) as again:
                raise _lost(run, str(again)) from again
    raise AssertionError("unreachable")


def wait_for_workers(actors: list, method: str, timeout: float = RESTART_TIMEOUT_S) -> list:
    """``method()`` of every Ray actor, waited for up to ``timeout`` seconds in all.

    A restarting actor (a worker killed and being restarted by Ray) answers a call with
    ``ActorUnavailableError`` at once; that is retried until the deadline, every
    :data:`RETRY_S` seconds. An actor that is dead for good (no restarts left, or killed with
    ``no_restart``) ends the wait at once.

    Raises:
        ClusterLost: an actor is dead for good, or still unavailable at the deadline.
    """
    import ray

    deadline = time.monotonic() + timeout
    while True:
        try:
            left = max(0.0, deadline - time.monotonic())
            return ray.get([getattr(actor, method).remote() for actor in actors], timeout=left)
        except ray.exceptions.ActorUnavailableError as error:
            if time.monotonic() >= deadline:
                raise ClusterLost(
                    f"the Ray workers did not come back within {timeout:g} s ({type(error).__name__})"
                ) from error
            time.sleep(RETRY_S)
        except (ray.exceptions.RayError, ConnectionError) as error:
            raise ClusterLost(f"the Ray workers did not come back ({type(error).__name__})") from error


def _lost(run, why: str) -> ClusterLost:
    return ClusterLost(
        f"lost the Ray cluster at step {run.step + 1}: {why}. The last checkpoint in {run.out_dir} "
        f"is intact; continue with: evolora evolve --resume {run.out_dir}"
    )
