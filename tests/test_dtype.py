"""``model.dtype: auto`` is detected from the hardware, and adapters stay fp32 under a bf16 base."""

from __future__ import annotations

import torch

from evolora.bank.local import AdapterBank
from evolora.config import config_from_dict
from evolora.model import load_base
from evolora.model.dtype import auto_dtype, cpu_has_bf16


def test_cpu_flags_decide(tmp_path):
    amd = "processor : 0\nflags\t\t: fpu sse2 avx512f avx512_bf16 avx512_vnni\n"
    intel = "flags : fpu avx512f amx_bf16 amx_tile\n"
    old = "flags : fpu sse2 avx2 avx512f\nbugs : avx512_bf16\n"  # only the flags line counts
    assert cpu_has_bf16(amd) and cpu_has_bf16(intel) and not cpu_has_bf16(old)
    assert auto_dtype("cpu") == "float32"  # whatever the flags: bf16 cost learning on a CPU (docs/results/dtype.md)
    assert auto_dtype("cuda") == (
        "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
    )


def test_auto_is_accepted_and_adapters_stay_fp32_under_a_bf16_base():
    assert config_from_dict({"model": {"dtype": "auto"}}).model.dtype == "auto"
    model, _ = load_base("tiny-random", dtype="auto")
    assert next(model.parameters()).dtype == getattr(torch, auto_dtype("cpu"))
    bf16, _ = load_base("tiny-random", dtype="bfloat16")
    bank = AdapterBank(bf16, ["A0"], rank=2, alpha=4)
    assert {p.dtype for p in bank.parameters("A0")} == {torch.float32}
    assert next(p for n, p in bank.model.named_parameters() if "lora" not in n).dtype == torch.bfloat16


def _steps(out):
    from evolora.io import read_jsonl

    return [row["step"] for row in read_jsonl(out / "metrics.jsonl")]


def test_a_run_resumes_across_base_dtypes_both_ways(tmp_path):
    """Checkpoints hold fp32 adapters and AdamW state only: an fp32 run resumes with a bf16 base and
    back, and the resumed run's adapters match the checkpoint it read."""
    from typer.testing import CliRunner

    from evolora.checkpoint import load_checkpoint
    from evolora.cli import app

    out = tmp_path / "run"
    tiny = [
        "--set",
        "model.name=tiny-random",
        "--set",
        "lora.rank=2",
        "--set",
        "selfplay.roles.teacher.max_new_tokens=6",
        "--set",
        "selfplay.roles.student.max_new_tokens=6",
        "--set",
        "eval.limit=0",
        "--set",
        "evolution.every=1",
    ]
    runner = CliRunner()
    done = runner.invoke(
        app,
        [
            "evolve",
            "tasks/arith.yaml",
            "--out",
            str(out),
            *tiny,
            "--set",
            "run.steps=1",
            "--set",
            "model.dtype=float32",
        ],
    )
    assert done.exit_code == 0, done.output
    for steps, dtype in ((2, "bfloat16"), (3, "float32")):
        done = runner.invoke(
            app, ["evolve", "--resume", str(out), "--set", f"run.steps={steps}", "--set", f"model.dtype={dtype}"]
        )
        assert done.exit_code == 0, done.output
        assert f"resumed at step {steps - 1}" in done.output
    assert _steps(out) == [1, 2, 3]
    factors, optimizers, _ = load_checkpoint(sorted((out / "checkpoints").iterdir())[-1])
    tensors = [t for adapter in factors.values() for pair in adapter.values() for t in pair]
    assert len(tensors) >= 4 * 2 and {t.dtype for t in tensors} == {torch.float32}
    moments = [
        v
        for state in optimizers.values()
        for slot in state["state"].values()
        for k, v in slot.items()
        if k.startswith("exp_avg")
    ]
    assert moments and {t.dtype for t in moments} == {torch.float32}
