"""A self-play step with a bf16 base vs an fp32 base: what ``model.dtype: auto`` buys on this machine.

Two runs of the same population (default 2 teachers + 2 students, as ``tasks/arith.yaml``) side by
side in one process, alternating step by step so load drift hits both alike. The work is equal:
``population_overhead.py``'s toy task (every proposal valid), every row exactly ``--tokens`` long,
a KL term so every sample trains. Prints the median seconds of each phase and the ratio
bf16 / fp32 of the whole step (target on a CPU with AMX or AVX512-BF16: <= 0.7).

    python benchmarks/dtype_step.py --threads 1
    python benchmarks/dtype_step.py --model tiny-random --steps 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from population_overhead import build_run  # benchmarks/population_overhead.py (scripts run from benchmarks/)

from evolora.model.dtype import BF16_CPU_FLAGS, cpu_flags

PHASES = ("rollout_teacher", "rollout_student", "train", "total")


def cpu_line() -> str:
    """The CPU model and its bf16 flags, for the figure's record."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "cpu unknown"
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    flags = sorted(cpu_flags(text) & set(BF16_CPU_FLAGS))
    return f"{model} ({', '.join(flags) or 'no bf16 flags'})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--teachers", type=int, default=2)
    parser.add_argument("--students", type=int, default=2)
    parser.add_argument("--proposals", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per dtype (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    extra = {"generation_batch": 16, "micro_batch": 4, "rank": 8, "kl_coef": 0.01}
    records: dict[str, list[dict]] = {"float32": [], "bfloat16": []}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            dtype: build_run(
                argparse.Namespace(**vars(args), **extra, dtype=dtype),
                args.teachers,
                args.students,
                args.proposals,
                f"{tmp}/{dtype}",
            )
            for dtype in records
        }
        for step in range(args.steps + 1):  # step 0 warms up
            for dtype, run in runs.items():
                record, _ = run.run_step()
                print(f"step {step} {dtype}: {record['seconds']['total']:.2f}s", file=sys.stderr, flush=True)
                if step > 0:
                    records[dtype].append(record)
    print(
        f"\n{args.model}, {args.teachers}T+{args.students}S, {args.tokens} tokens per row, {args.threads} threads, "
        f"median of {args.steps} steps; {cpu_line()}"
    )
    print(f"{'dtype':<10}" + "".join(f"{p:>17}" for p in PHASES))
    medians = {
        dtype: {p: statistics.median(r["seconds"].get(p, 0.0) for r in recs) for p in PHASES}
        for dtype, recs in records.items()
    }
    for dtype, parts in medians.items():
        print(f"{dtype:<10}" + "".join(f"{parts[p]:>17.2f}" for p in PHASES))
    ratios = [b["seconds"]["total"] / f["seconds"]["total"] for b, f in zip(records["bfloat16"], records["float32"])]
    print(
        f"ratio bf16/fp32 step time: {statistics.median(ratios):.2f} (per step: "
        + ", ".join(f"{r:.2f}" for r in ratios)
        + ")"
    )


if __name__ == "__main__":
    main()
