"""benchmarks/job_floor.py: a job's FLOPs counted by phase, and the formulas it adds to torch's counter."""

from __future__ import annotations

import json
import re

import pytest
from run_helpers import BENCHMARKS, benchmark_module, run_benchmark

TINY_GSM = [
    "--set", "model.name=tiny-random", "--set", "run.steps=1", "--set", "eval.limit=2", "--set", "eval.family=2",
    "--set", "selfplay.roles.student.max_new_tokens=4", "--set", "task.params.problem_tokens=4",
    "--set", "task.params.program_tokens=4", "--set", "eval.max_new_tokens=4",
]  # fmt: skip


@pytest.mark.slow  # a whole tiny run in a subprocess
def test_job_floor_counts_a_tiny_job_by_phase_and_prints_its_floor(tmp_path):
    """``count`` splits a 1-step tiny gsm job's FLOPs by the run's phases; ``floor`` sets them
    beside the run's own step seconds."""
    flops = tmp_path / "flops.json"
    run = tmp_path / "run"
    gsm = str(BENCHMARKS.parent / "tasks" / "gsm.yaml")
    run_benchmark("job_floor.py", "count", gsm, "--out", str(run), "--json", str(flops), *TINY_GSM)
    phases = json.loads(flops.read_text())["flops"]
    assert phases["selfplay"] > 0 and phases["train"] > 0 and phases["held_out"] > 0, phases
    stdout = run_benchmark("job_floor.py", "floor", str(flops), "--rate", "100", "--seconds", str(run))
    assert re.search(r"ratio floor/run, the steps \(selfplay, train(, evolve)?\): \d+\.\d+", stdout), stdout


def test_job_floor_counts_the_packed_linear_and_cpu_attention():
    """The formulas ``FlopCounterMode`` lacks: 2 · rows · d_in · d_out for a packed linear; 2 · 2 · b ·
    h · s_q · s_k · d for attention (backward 2.5x that)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from evolora.model.prepack import pack_weight, packed_linear, prepack_supported

    job_floor = benchmark_module("job_floor")
    packs = prepack_supported(torch.float32)  # its one-shot check multiplies too: outside the count
    counter = FlopCounterMode(display=False, custom_mapping=job_floor.custom_mapping())
    query = torch.randn(2, 3, 3, 64, requires_grad=True)
    key = torch.randn(2, 3, 10, 64)
    with counter:
        torch.nn.functional.scaled_dot_product_attention(query, key, key).sum().backward()
        if packs:
            packed_linear(torch.randn(8, 576), pack_weight(torch.randn(1536, 576)), 1536)
    counts = {str(op): flops for op, flops in counter.get_flop_counts()["Global"].items()}
    attention = 2 * 2 * 2 * 3 * 3 * 10 * 64
    assert counts["aten._scaled_dot_product_flash_attention_for_cpu"] == attention
    assert counts["aten._scaled_dot_product_flash_attention_for_cpu_backward"] == 2.5 * attention
    if packs:
        assert counts["mkldnn._linear_pointwise"] == 2 * 8 * 576 * 1536
