"""Shared by the kernels' tests: a Triton kernel module imported for the interpreter (or a GPU)."""

from __future__ import annotations

import importlib
import os

import pytest
import torch


def kernels_module(name: str, kernel: str):
    """Yield (the Triton module ``name``, the device its kernels run on): interpreted on the CPU (the
    interpreter reads ``TRITON_INTERPRET`` when a kernel is decorated and when it runs: set while the
    fixture lives), or CUDA when the module was already compiled for it in this process."""
    pytest.importorskip("triton", reason="the Triton kernels' tests need triton (pip install 'evolora[gpu]')")
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        module = importlib.import_module(name)
        if type(getattr(module, kernel)).__name__ == "InterpretedFunction":
            yield module, torch.device("cpu")
        elif torch.cuda.is_available():
            yield module, torch.device("cuda")
        else:
            pytest.skip("the Triton kernels were compiled for a GPU in this process and no GPU is here")
    finally:
        os.environ.pop("TRITON_INTERPRET") if previous is None else os.environ.update(TRITON_INTERPRET=previous)
