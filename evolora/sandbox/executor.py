"""Run untrusted, model-written Python in a separate, limited process.

Model-written code is hostile input. Defence in depth, cheapest layer first:

1. ``check_source``: an AST check in the caller rejects imports outside a small allowlist
   of pure-computation modules, dangerous builtins (``eval``, ``open``, ``getattr``, …),
   dunder access (``x.__class__``) and attributes that lead back to banned modules
   (``statistics.sys``, ``operator.attrgetter``). Rejected programs never start.
2. The child runs ``python -S -s -B -P`` (no site-packages, no user site, no bytecode, no
   cwd on ``sys.path``) with a minimal environment in a fresh temporary directory, in its
   own session (process group), as user ``nobody`` when the caller is root and the
   interpreter is readable by ``nobody`` (otherwise as the caller).
3. A small boot script in the child sets ``resource`` limits (address space, CPU time,
   file size 0, no core files, few file descriptors, no new processes where the kernel
   enforces it), then ``exec``s the program with a filtered ``__builtins__`` (no
   ``open``/``eval``/``exec``/``getattr``/…) and an ``__import__`` that re-checks the
   allowlist for imports made by the program itself.
4. The caller reads stdout and stderr in chunks with a cap, enforces a wall-clock deadline
   and kills the whole process group with SIGKILL when the program ends, overruns or
   prints too much. Nothing the program does can raise in, or hang, the caller.

Source: Absolute Zero Reasoner (arXiv 2505.03335) executor checks; the threat model is in
README.md, "Security model".
"""

from __future__ import annotations

import ast
import logging
import math
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

from evolora.parsing import PARSE_ERRORS
from evolora.sandbox.policy import ALLOWED_MODULES, BANNED_NAMES, MAX_SOURCE_CHARS, check_source

Status = Literal["ok", "error", "timeout", "memory", "banned", "output_limit"]


@dataclass(frozen=True)
class SandboxResult:
    """What one sandboxed run produced.

    Attributes:
        status: "ok" (exit 0), "error" (exception, syntax error, non-zero exit, crash),
            "timeout" (wall-clock or CPU limit), "memory" (MemoryError or allocation
            failure), "banned" (refused by the static check, or an import the runtime
            guard refused), "output_limit" (stdout exceeded the cap; the process was killed).
        output: stdout decoded as UTF-8 (invalid bytes replaced), at most ``output_limit``
            bytes.
        error: the last non-empty stderr line (or the refusal reason), "" when none.
        seconds: wall-clock seconds for the run, including process start.
    """

    status: Status
    output: str
    error: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == "ok"


from evolora.sandbox.boot import BOOT as _BOOT  # noqa: E402 (the child side)
from evolora.sandbox.boot import LAZY_IMPORTS as _LAZY_IMPORTS  # noqa: E402

_log = logging.getLogger(__name__)
_NOBODY = 65534
_drop_privileges = hasattr(os, "geteuid") and os.geteuid() == 0
_drop_lock = threading.Lock()
_ERROR_CAP = 64 * 1024


def _world_executable(path: str) -> bool:
    """True when every directory on the path is world-searchable and the file world-executable."""
    path = os.path.realpath(path)
    parts = path.split(os.sep)
    try:
        for i in range(2, len(parts)):
            if not os.stat(os.sep.join(parts[:i])).st_mode & 0o001:
                return False
        return bool(os.stat(path).st_mode & 0o005 == 0o005)
    except OSError:
        return False


def _pick_interpreter() -> str:
    """The base interpreter (site-packages are not used); when running as root and it is
    hidden from ``nobody`` (e.g. under /root/.pyenv), the same X.Y version in /usr/bin or
    /usr/local/bin if there is one, so programs can run unprivileged."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    if not _drop_privileges or _world_executable(base):
        return base
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for folder in ("/usr/local/bin", "/usr/bin"):
        candidate = os.path.join(folder, version)
        if os.path.isfile(candidate) and _world_executable(candidate):
            return candidate
    return base


PYTHON = _pick_interpreter()
"""The interpreter that runs programs (see ``_pick_interpreter``)."""


def _child_env() -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
        "LC_ALL": "C.UTF-8",
    }


def _spawn(args: list[str], cwd: str, stdin) -> subprocess.Popen:
    """Start the child, as ``nobody`` when possible; fall back to the caller's user."""
    global _drop_privileges
    common = dict(
        cwd=cwd,
        env=_child_env(),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )
    if _drop_privileges:
        try:
            os.chown(cwd, _NOBODY, _NOBODY)
            return subprocess.Popen(args, user=_NOBODY, group=_NOBODY, extra_groups=[], **common)
        except OSError as exc:  # interpreter or workdir hidden from nobody, or no CAP_SETUID
            with _drop_lock:
                if _drop_privileges:
                    _log.warning(
                        "sandbox: cannot run programs as nobody (%s); running them as the "
                        "calling user. Point TMPDIR at a world-searchable directory.",
                        exc,
                    )
                _drop_privileges = False
            os.chown(cwd, os.getuid(), os.getgid())
    return subprocess.Popen(args, **common)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()[:500]
    return ""


def _classify(returncode: int | None, stderr: str) -> tuple[Status, str]:
    last = _last_line(stderr)
    if returncode == 0:
        return "ok", last
    if returncode is not None and returncode < 0:
        sig = -returncode
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        if sig in (signal.SIGXCPU, signal.SIGKILL):
            return "timeout", f"killed by {name} (CPU time limit)"
        if "MemoryError" in stderr or "Cannot allocate memory" in stderr:
            return "memory", last or f"killed by {name}"
        return "error", last or f"killed by {name}"
    if (
        last.startswith("MemoryError")
        or "Cannot allocate memory" in stderr
        or ("MemoryError" in stderr and "Traceback" not in stderr)
    ):
        return "memory", last
    if "sandbox: import of module" in last or ("sandbox: " in last and "is not allowed" in last):
        return "banned", last
    return "error", last or f"exit status {returncode}"


def run_program(
    source: str,
    *,
    timeout_s: float = 2.0,
    memory_mb: int = 256,
    output_limit: int = 10_000,
    stdin: str | None = None,
) -> SandboxResult:
    """Run one untrusted program in a fresh, limited process and report what happened.

    Args:
        source: Python source text.
        timeout_s: wall-clock limit in seconds (> 0), including interpreter start
            (~20 ms). The CPU-time limit is ``ceil(timeout_s) + 1`` seconds.
        memory_mb: address-space limit in MiB (>= 32; Python itself needs ~15 MiB).
        output_limit: stdout cap in bytes (>= 1); over it the process is killed and the
            status is "output_limit".
        stdin: text fed to the program's standard input (empty when None).

    Returns:
        A :class:`SandboxResult`. Never raises for anything the program does.

    Raises:
        ValueError: on out-of-range limits (a caller bug, not program behaviour).
    """
    if not timeout_s > 0 or memory_mb < 32 or output_limit < 1:
        raise ValueError(
            f"sandbox limits out of range: timeout_s={timeout_s!r} (> 0), "
            f"memory_mb={memory_mb!r} (>= 32), output_limit={output_limit!r} (>= 1)"
        )
    start = time.perf_counter()
    try:
        return _run(source, timeout_s, memory_mb, output_limit, stdin, start)
    except Exception as exc:  # a bug or an OS failure here must not stop a training run
        _log.warning("sandbox: internal failure running a program", exc_info=True)
        return SandboxResult(
            "error", "", f"sandbox internal error: {type(exc).__name__}: {exc}", time.perf_counter() - start
        )


def _run(
    source: str, timeout_s: float, memory_mb: int, output_limit: int, stdin: str | None, start: float
) -> SandboxResult:
    if len(source) > MAX_SOURCE_CHARS:
        return SandboxResult("error", "", f"source longer than {MAX_SOURCE_CHARS} characters", 0.0)
    try:
        ast.parse(source)
        source.encode("utf-8")
    except PARSE_ERRORS as exc:
        return SandboxResult("error", "", f"{type(exc).__name__}: {exc}"[:500], 0.0)
    reason = check_source(source, allow_input=stdin is not None)
    if reason is not None:
        return SandboxResult("banned", "", reason, time.perf_counter() - start)

    with tempfile.TemporaryDirectory(prefix="evolora-sandbox-") as workdir:
        with open(os.path.join(workdir, "prog.py"), "w", encoding="utf-8") as f:
            f.write(source)
        stdin_handle = subprocess.DEVNULL
        if stdin is not None:
            with open(os.path.join(workdir, "stdin.txt"), "w", encoding="utf-8") as f:
                f.write(stdin)
            stdin_handle = open(os.path.join(workdir, "stdin.txt"), "rb")
        os.chmod(os.path.join(workdir, "prog.py"), 0o644)
        args = [
            PYTHON,
            "-S",
            "-s",
            "-B",
            "-P",
            "-c",
            _BOOT,
            str(memory_mb * 1024 * 1024),
            str(math.ceil(timeout_s) + 1),
            "64",
            ",".join(sorted(ALLOWED_MODULES | _LAZY_IMPORTS)),
            ",".join(sorted(BANNED_NAMES - ({"input"} if stdin is not None else set()))),
        ]
        try:
            proc = _spawn(args, workdir, stdin_handle)
        except OSError as exc:
            return SandboxResult("error", "", f"could not start interpreter: {exc}", time.perf_counter() - start)
        finally:
            if stdin is not None:
                stdin_handle.close()
        status, out, err = _collect(proc, start + timeout_s, output_limit)
        seconds = time.perf_counter() - start
    stderr = err.decode("utf-8", errors="replace")
    output = out[:output_limit].decode("utf-8", errors="replace")
    if status is not None:
        detail = (
            f"wall-clock limit {timeout_s:g} s exceeded"
            if status == "timeout"
            else f"stdout exceeded {output_limit} bytes"
        )
        return SandboxResult(status, output, detail, seconds)
    status, error = _classify(proc.returncode, stderr)
    return SandboxResult(status, output, error, seconds)


def _collect(proc: subprocess.Popen, deadline: float, output_limit: int) -> tuple[Status | None, bytes, bytes]:
    """Read stdout/stderr until EOF, the deadline, or the output cap; reap the group."""
    out, err = bytearray(), bytearray()
    status: Status | None = None
    selector = selectors.DefaultSelector()
    try:
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        while selector.get_map() and status is None:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                status = "timeout"
                break
            for key, _ in selector.select(min(remaining, 0.5)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                elif key.fileobj is proc.stdout:
                    out += chunk
                    if len(out) > output_limit:
                        status = "output_limit"
                        break
                else:
                    err += chunk
                    if len(err) > _ERROR_CAP:
                        del err[:-_ERROR_CAP]
        if status is None:
            try:
                proc.wait(timeout=max(deadline - time.perf_counter(), 0.0))
            except subprocess.TimeoutExpired:
                status = "timeout"
    finally:
        _kill_group(proc)
        selector.close()
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # pragma: no cover - unkillable (D state)
            pass
        for stream in (proc.stdout, proc.stderr):
            stream.close()
    return status, bytes(out), bytes(err)


class SandboxPool:
    """Run many programs concurrently, a bounded number at a time.

    Each program still gets its own process (see :func:`run_program`); the pool only
    bounds concurrency with a thread per slot, which waits on the child's pipes.

    >>> with SandboxPool(workers=2) as pool:
    ...     [r.output for r in pool.map(["print(1)", "print(2)"])]
    ['1\\n', '2\\n']
    """

    def __init__(self, workers: int = 2) -> None:
        if workers < 1:
            raise ValueError(f"SandboxPool needs workers >= 1, got {workers!r}")
        self.workers = workers
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox")

    def map(self, sources: Iterable[str], **limits) -> list[SandboxResult]:
        """Run every source with the same limits (``run_program`` keywords); order kept."""
        futures = [self._executor.submit(run_program, s, **limits) for s in sources]
        return [f.result() for f in futures]

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
