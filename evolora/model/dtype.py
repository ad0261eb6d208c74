"""``model.dtype: auto``: bf16 where the hardware computes it natively, fp32 elsewhere.

    auto_dtype("cpu")    # "bfloat16" on a CPU with AMX or AVX512-BF16, else "float32"
    auto_dtype("cuda")   # "bfloat16" when the GPU supports it, else "float32"

The base weights take this dtype; adapter factors and optimizer state stay fp32 whatever it is.
Source: PopuLoRA (arXiv 2605.16727) §2 (one frozen base shared by every adapter).
"""

from __future__ import annotations

from pathlib import Path

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""``/proc/cpuinfo`` flags of CPUs with native bf16 matrix arithmetic."""


def cpu_flags(cpuinfo: str) -> set[str]:
    """The flags named on the ``flags`` lines of a ``/proc/cpuinfo`` text (other lines, such as
    ``bugs``, do not count)."""
    return {flag for line in cpuinfo.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[-1].split()}


def cpu_has_bf16(cpuinfo: str) -> bool:
    """Whether the ``flags`` lines of a ``/proc/cpuinfo`` text name AMX-BF16 or AVX512-BF16.

    >>> cpu_has_bf16("flags : fpu avx2 avx512_bf16"), cpu_has_bf16("flags : fpu avx2 avx512f")
    (True, False)
    """
    return any(flag in cpu_flags(cpuinfo) for flag in BF16_CPU_FLAGS)


def auto_dtype(device: str, cpuinfo_path: str | Path = "/proc/cpuinfo") -> str:
    """``"bfloat16"`` or ``"float32"`` for ``device`` (``cpu`` or ``cuda``), detected, never assumed.

    A CPU whose flags cannot be read (not Linux) gets fp32.
    """
    if device.startswith("cuda"):
        import torch

        return "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
    try:
        return "bfloat16" if cpu_has_bf16(Path(cpuinfo_path).read_text()) else "float32"
    except OSError:
        return "float32"


def resolve_dtype(dtype: str, device: str) -> str:
    """``dtype`` as it will load on ``device`` (a resolved device such as ``cpu`` or ``cuda:0``):
    :func:`auto_dtype` for ``"auto"``, itself otherwise."""
    return auto_dtype(device) if dtype == "auto" else dtype
