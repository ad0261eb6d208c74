"""``model.dtype: auto``: bf16 on GPUs that support it, float32 on CPUs.

    auto_dtype("cpu")    # "float32", also on CPUs with AMX or AVX512-BF16 (bf16 learned less there: one CPU, one task, docs/results/dtype.md)
    auto_dtype("cuda")   # "bfloat16" when the GPU supports it, else "float32"

On a CPU, a bf16 base ran the default arith population about 2x faster but learned 2.3 points
less held-out accuracy than float32 ([−3.8, −0.9], 6 paired seeds; docs/results/dtype.md), so
``auto`` keeps float32 there and ``model.dtype: bfloat16`` asks for the speed.
:func:`cpu_has_bf16` says whether that choice computes natively. The base weights take the
dtype; adapter factors and optimizer state stay fp32 whatever it is.
Source: PopuLoRA (arXiv 2605.16727) §2 (one frozen base shared by every adapter).
"""

from __future__ import annotations

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""``/proc/cpuinfo`` flags of CPUs with native bf16 matrix arithmetic."""


def cpu_flags(cpuinfo: str) -> set[str]:
    """The flags named on the ``flags`` lines of a ``/proc/cpuinfo`` text (other lines, such as
    ``bugs``, do not count)."""
    return {
        flag for line in cpuinfo.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[-1].split()
    }


def cpu_has_bf16(cpuinfo: str) -> bool:
    """Whether the ``flags`` lines of a ``/proc/cpuinfo`` text name AMX-BF16 or AVX512-BF16.

    >>> cpu_has_bf16("flags : fpu avx2 avx512_bf16"), cpu_has_bf16("flags : fpu avx2 avx512f")
    (True, False)
    """
    return any(flag in cpu_flags(cpuinfo) for flag in BF16_CPU_FLAGS)


def auto_dtype(device: str) -> str:
    """``"bfloat16"`` or ``"float32"`` for ``device`` (``cpu`` or ``cuda``): bf16 on a GPU that
    supports it (detected, never assumed), float32 on every CPU (see the module docstring)."""
    if device.startswith("cuda"):
        import torch

        return "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
    return "float32"


def resolve_dtype(dtype: str, device: str) -> str:
    """``dtype`` as it will load on ``device`` (a resolved device such as ``cpu`` or ``cuda:0``):
    :func:`auto_dtype` for ``"auto"``, itself otherwise."""
    return auto_dtype(device) if dtype == "auto" else dtype
