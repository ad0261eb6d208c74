"""``model.dtype: auto`` is detected from the hardware, and adapters stay fp32 under a bf16 base."""

from __future__ import annotations

import torch

from evolora.config import config_from_dict
from evolora.model import load_base
from evolora.model.dtype import auto_dtype, cpu_has_bf16
from evolora.population import AdapterBank


def test_cpu_flags_decide(tmp_path):
    amd = "processor : 0\nflags\t\t: fpu sse2 avx512f avx512_bf16 avx512_vnni\n"
    intel = "flags : fpu avx512f amx_bf16 amx_tile\n"
    old = "flags : fpu sse2 avx2 avx512f\nbugs : avx512_bf16\n"  # only the flags line counts
    assert cpu_has_bf16(amd) and cpu_has_bf16(intel) and not cpu_has_bf16(old)
    (tmp_path / "cpuinfo").write_text(amd)
    assert auto_dtype("cpu", tmp_path / "cpuinfo") == "bfloat16"
    (tmp_path / "cpuinfo").write_text(old)
    assert auto_dtype("cpu", tmp_path / "cpuinfo") == "float32"
    assert auto_dtype("cpu", tmp_path / "missing") == "float32"
    assert auto_dtype("cuda") == ("bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported()
                                  else "float32")


def test_auto_is_accepted_and_adapters_stay_fp32_under_a_bf16_base():
    assert config_from_dict({"model": {"dtype": "auto"}}).model.dtype == "auto"
    model, _ = load_base("tiny-random", dtype="auto")
    assert next(model.parameters()).dtype == getattr(torch, auto_dtype("cpu"))
    bf16, _ = load_base("tiny-random", dtype="bfloat16")
    bank = AdapterBank(bf16, ["A0"], rank=2, alpha=4)
    assert {p.dtype for p in bank.parameters("A0")} == {torch.float32}
    assert next(p for n, p in bank.model.named_parameters() if "lora" not in n).dtype == torch.bfloat16
