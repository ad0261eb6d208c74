"""``model.num_threads: auto``: as many torch threads as there are free cores, checked between phases.

A 2-thread OpenMP op on a core another process wants waits a scheduler quantum whenever its peer
thread is descheduled: beside a plain 2-process CPU hog on 2 cores, one default arith step took
4.85x its idle time at 2 threads where a fair share costs about 2x (docs/performance.md). So
``auto`` counts the cores this process may use and the threads other processes keep runnable, and
takes what is left (at least 1):

    cores   = |sched_getaffinity| (capped by a cgroup CPU quota)
    others  = runnable threads system-wide − this process's own (median of a 0.2 s sample)
    threads = clamp(cores − others, 1, cores), then at most cores ÷ (1 + runs beside it)

where *runs beside it* are the other live evolora processes on the machine that hold a run
directory's lock (``RUN_DIR/.lock``, taken before the model loads), wherever those directories
are: two runs on 2 cores take one thread each, also when both start at the same moment on idle
cores, where neither yet keeps a thread runnable. :class:`ThreadPolicy` applies the rule before
the first step and again after every step, and says one line when it takes fewer threads than
there are cores. It also glances at the machine at the start of every phase of a step (each play,
the update, the evolution event with its exam, each held-out evaluation batch:
:meth:`evolora.run.Run.phase`): one read of the runnable count plus the lock scan, under a
millisecond of CPU; the full 0.2 s sample follows only when that glance would change the count, and
then at once when the runs beside it or the cores changed, else at most once per ``RECHECK_GAP``
seconds (a noisy single read costs at most 0.2 s a minute).
An int ``model.num_threads`` is used as given (no checks); pin one when runs must give the same
numbers, as thread counts change float sums.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from pathlib import Path
from typing import Callable, Literal

from evolora.run_dir import LOCK

ThreadSetting = int | Literal["auto"] | None
"""``model.num_threads``: an int ≥ 1 (used as given), ``auto`` (this module) or None (torch's default)."""

SAMPLES = 11
"""Reads of the runnable-thread count per check, ``SAMPLE_GAP`` seconds apart (median taken)."""
SAMPLE_GAP = 0.02
RECHECK_GAP = 60.0
"""Seconds between two full samples that a phase's glance asks for while the cores and the runs
beside this one stay the same (a change of either is sampled at the next phase)."""


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity (``os.cpu_count()`` where there is none),
    capped by a cgroup v2 CPU quota (``/sys/fs/cgroup/cpu.max``) when one is set; at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def _runnable_total() -> int | None:
    """``procs_running`` of ``/proc/stat``: runnable threads system-wide now (None off Linux)."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("procs_running"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _runnable_own() -> int:
    """Threads of this process in state R (running or runnable) now; 1 where /proc is missing."""
    count = 0
    try:
        tasks = list(Path("/proc/self/task").iterdir())
    except OSError:
        return 1
    for task in tasks:
        try:
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        count += state == "R"
    return max(1, count)


def other_runnable(*, samples: int = SAMPLES, gap: float = SAMPLE_GAP) -> float:
    """Runnable threads of other processes: median over ``samples`` reads ``gap`` s apart of the
    system-wide count minus this process's own (Linux ``/proc``); elsewhere the 1-minute load
    average (``os.getloadavg``), which counts this process too; 0.0 when neither exists."""
    reads = []
    for i in range(samples):
        total = _runnable_total()
        if total is None:
            break
        reads.append(max(0, total - _runnable_own()))
        if i + 1 < samples:
            time.sleep(gap)
    if reads:
        return float(statistics.median(reads))
    try:
        return max(0.0, os.getloadavg()[0] - 1.0)
    except (AttributeError, OSError):
        return 0.0


def _held_flocks() -> dict[int, set[int]]:
    """{pid: inodes of the files it holds an ``flock`` on}, from ``/proc/locks`` ({} off Linux)."""
    held: dict[int, set[int]] = {}
    try:
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[4].isdigit():
                held.setdefault(int(fields[4]), set()).add(int(fields[5].rsplit(":", 1)[1]))
    except (OSError, ValueError, IndexError):
        return {}
    return held


_RUN_LOCKS: dict[tuple[int, frozenset[int]], bool] = {}
"""What :func:`_holds_run_lock` found per (pid, inodes it holds flocks on) at the last scan: a run
holds its lock from start to end, so only a new holder, or a new lock of one, has its open files
read (the scan of a phase's glance is then one read of ``/proc/locks``)."""


def _holds_run_lock(pid: int, inodes: set[int] | frozenset[int]) -> bool:
    """Whether process ``pid`` has a run directory's ``.lock`` open among ``inodes`` (its
    ``/proc/PID/fd``; False where that cannot be read, e.g. another user's process)."""
    try:
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for descriptor in descriptors:
        try:
            if os.readlink(descriptor).endswith(f"/{LOCK}") and descriptor.stat().st_ino in inodes:
                return True
        except OSError:
            continue
    return False


def runs_beside() -> int:
    """Live evolora runs of other processes on this machine, wherever their run directories are:
    the processes other than this one that hold a run directory's ``.lock``
    (:func:`evolora.run_dir.lock_run_dir`: ``evolora evolve``, ``study``, ``evaluate``), read from
    ``/proc/locks`` and the holders' open files without touching the locks. A run holds its lock
    from its start, before its model loads, so two runs started at the same moment see each other
    at their first check. A holder's open files are read once per lock it holds (``_RUN_LOCKS``).
    Processes of other users are not seen; 0 off Linux."""
    own = os.getpid()
    keys = {(pid, frozenset(inodes)) for pid, inodes in _held_flocks().items() if pid != own}
    known = {key: _RUN_LOCKS[key] if key in _RUN_LOCKS else _holds_run_lock(*key) for key in keys}
    _RUN_LOCKS.clear()  # only the holders of now are kept
    _RUN_LOCKS.update(known)
    return sum(known.values())


def auto_threads(cores: int, others: float, beside: int = 0) -> int:
    """The rule of ``auto``: ``clamp(round(cores − others), 1, cores)``, then at most
    ``cores // (1 + beside)`` (at least 1).

    >>> auto_threads(2, 0.0), auto_threads(2, 2.0), auto_threads(8, 3.0), auto_threads(2, 0.0, beside=1)
    (2, 1, 5, 1)

    Raises:
        ValueError: ``cores < 1``, ``others < 0`` or ``beside < 0``.
    """
    if cores < 1 or others < 0 or beside < 0:
        raise ValueError(f"cores >= 1, others >= 0 and beside >= 0 expected; got {cores}, {others}, {beside}")
    threads = min(cores, max(1, math.floor(cores - others + 0.5)))
    return max(1, min(threads, cores // (1 + beside)))


def quick_probe() -> tuple[int, float, int]:
    """The cheap reading of a phase's check: (cores, other runnable threads from one read, runs
    beside); :func:`usable_cores`, :func:`other_runnable` with one sample, :func:`runs_beside`."""
    return usable_cores(), other_runnable(samples=1), runs_beside()


class ThreadPolicy:
    """Sets torch's intra-op threads from ``model.num_threads`` before the first step and, under
    ``auto``, again after every step (use it as a :meth:`evolora.run.Run.train` callback) and, when
    a glance says so, at the start of every phase (:meth:`at_phase`, a hook of
    :attr:`evolora.run.Run.phase_hooks`).

    Args:
        setting: ``model.num_threads``: an int (set once), ``"auto"`` (the module's rule) or None
            (torch's default: nothing is set).
        say: called with one line when ``auto`` takes fewer threads than there are cores (the
            machine is oversubscribed, or runs beside this one share it), and whenever it changes
            the thread count afterwards.
        probe: ``() -> (cores, other runnable threads, runs beside)``, the full sample; default the
            live machine (:func:`usable_cores`, :func:`other_runnable`, :func:`runs_beside`).
        glance: the same triple read cheaply at a phase's start (default :func:`quick_probe`).
        clock: seconds, monotonic (default ``time.monotonic``), for ``RECHECK_GAP``.

    Attributes:
        threads: the count last set (None: nothing set yet).
        samples: full samples taken so far (``probe`` calls).

    Raises:
        ValueError: an int setting below 1, or a value that is neither an int, ``"auto"`` nor None.
    """

    def __init__(
        self,
        setting: ThreadSetting,
        say: Callable[[str], None] | None = None,
        probe: Callable[[], tuple[int, float, int]] | None = None,
        glance: Callable[[], tuple[int, float, int]] = quick_probe,
        clock: Callable[[], float] = time.monotonic,
    ):
        if not (setting is None or setting == "auto" or (isinstance(setting, int) and not isinstance(setting, bool))):
            raise ValueError(f"model.num_threads must be an int >= 1, auto or null; got {setting!r}")
        if isinstance(setting, int) and setting < 1:
            raise ValueError(f"model.num_threads must be >= 1, got {setting}")
        self.setting = setting
        self.say = say or (lambda line: None)
        self.probe = probe or (lambda: (usable_cores(), other_runnable(), runs_beside()))
        self.glance = glance
        self.clock = clock
        self.threads: int | None = None
        self.samples = 0
        self._sampled: tuple[float, int, int] | None = None  # (when, cores, runs beside) of the last full sample

    def choose(self) -> int | None:
        """The thread count the setting asks for now (None: leave torch's default)."""
        if self.setting != "auto":
            return self.setting
        cores, others, beside = self.probe()
        self.samples += 1
        self._sampled = (self.clock(), cores, beside)
        threads = auto_threads(cores, others, beside)
        busy = others + threads > cores
        if threads != self.threads and (busy or beside or self.threads is not None):
            why = f"{others:g} runnable threads of other processes" + (
                f", {beside} evolora run{'s' * (beside != 1)} beside this one" if beside else ""
            )
            freed = self.threads is not None and threads > self.threads
            self.say(
                f"{'busy machine' if busy else 'cores freed' if freed else 'shared machine'}: {why} on {cores} cores; "
                f"torch uses {threads} thread{'s' * (threads > 1)} (model.num_threads: auto)"
            )
        return threads

    def apply(self) -> int | None:
        """Set torch's threads to :meth:`choose`'s count; returns it (None: nothing set)."""
        import torch

        threads = self.choose()
        if threads is not None and threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        self.threads = threads
        return threads

    def at_phase(self, phase: str = "") -> int | None:
        """A phase hook (``phase``: its name, unused): under ``auto``, glance at the machine and
        :meth:`apply` the full rule only when the glance's count differs from the one set, and
        then when the cores or the runs beside changed since the last full sample or
        ``RECHECK_GAP`` seconds have passed; returns the count set (an int setting or None: as is)."""
        if self.setting != "auto":
            return self.threads
        if self._sampled is None or self.threads is None:
            return self.apply()
        cores, others, beside = self.glance()
        if auto_threads(cores, others, beside) == self.threads:
            return self.threads
        when, sampled_cores, sampled_beside = self._sampled
        if (cores, beside) != (sampled_cores, sampled_beside) or self.clock() - when >= RECHECK_GAP:
            return self.apply()
        return self.threads

    def __call__(self, run, record: dict, games: list) -> None:
        """A step callback: re-check between steps under ``auto``."""
        if self.setting == "auto":
            self.apply()
