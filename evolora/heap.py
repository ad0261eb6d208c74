"""Give freed heap memory back to the operating system between phases of a step.

glibc raises its mmap threshold each time a large block is freed (up to 32 MB), so after the
first rollouts most tensors live in the heap, and a freed heap block stays in the process:
measured on a default gsm step (SmolLM2-135M, fp32), the RSS after the rollouts stays at
1.75 GB although the live tensors are ~0.6 GB, and the update then starts from there.
``malloc_trim(0)`` returns those pages (a few ms); elsewhere (macOS, musl) this is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_LIBC: ctypes.CDLL | None | bool = None


def trim() -> bool:
    """Return freed heap pages to the OS (glibc ``malloc_trim(0)``).

    Returns:
        True when glibc released memory, False when it released none or has no
        ``malloc_trim`` (not Linux/glibc). Never raises.
    """
    global _LIBC
    if _LIBC is None:
        _LIBC = False
        if sys.platform.startswith("linux"):
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                _LIBC = libc if hasattr(libc, "malloc_trim") else False
            except OSError:
                _LIBC = False
    return bool(_LIBC and _LIBC.malloc_trim(0))
