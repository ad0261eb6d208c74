"""The main job's arithmetic floor: its FLOPs per phase, counted, over this machine's fp32 GEMM rate.

``count`` runs ``evolora evolve CONFIG`` in this process under torch's ``FlopCounterMode`` (every
mm, addmm, bmm, baddbmm, packed oneDNN linear and attention, forward and backward; elementwise ops,
norms and sampling count nothing) and splits the count by the run's phases (the hooks of
:meth:`evolora.run.Run.phase`: ``selfplay``, ``train``, ``evolve``, ``fitness``, ``held_out``). The
counts do not depend on the machine's load, so a busy machine may count.

``rate`` measures the best fp32 GEMM rate of this machine at the job's threads: SmolLM2's packed
gate/up (1536 × 576) and LM head (49152 × 576) over 2,048 rows, the shapes a prefill or an update
multiplies at its best, best of several passes. Run it on a quiet machine.

``floor`` divides the counts by the rate: the seconds the job's arithmetic alone takes at that rate,
beside the phase seconds of a quiet run of the same job (``--seconds RUN``: its metrics.jsonl).

    python benchmarks/job_floor.py count tasks/gsm.yaml --out /tmp/floor-run --json /tmp/flops.json
    python benchmarks/job_floor.py rate --threads 2
    python benchmarks/job_floor.py floor /tmp/flops.json --rate 210 --seconds runs/gsm
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import torch
from _timing import median_seconds  # benchmarks/_timing.py (scripts run from benchmarks/)

PHASES_OF_STEPS = {
    "selfplay": ("rollout_teacher", "verify", "rollout_student"),
    "train": ("train",),
    "evolve": ("evolve",),
}


def _packed_linear_flops(x_shape, weight_shape, *args, out_shape=None, **kwargs) -> int:
    """``mkldnn._linear_pointwise``: 2 · rows · d_in · d_out."""
    return 2 * math.prod(x_shape) * out_shape[-1]


def _cpu_attention_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_attention_backward_flops(grad_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_shape, query_shape, key_shape, value_shape)


def custom_mapping() -> dict:
    """FLOP formulas of the CPU ops ``FlopCounterMode`` does not know (the packed linear, CPU flash attention)."""
    ops, aten = torch.ops.mkldnn, torch.ops.aten
    mapping = {}
    if hasattr(ops, "_linear_pointwise"):
        mapping[ops._linear_pointwise] = _packed_linear_flops
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        mapping[aten._scaled_dot_product_flash_attention_for_cpu] = _cpu_attention_flops
        mapping[aten._scaled_dot_product_flash_attention_for_cpu_backward] = _cpu_attention_backward_flops
    return mapping


def count(args) -> None:
    """Run the job under ``FlopCounterMode``; write {phase: FLOP} (with the config and overrides) as JSON."""
    from torch.utils.flop_counter import FlopCounterMode

    from evolora.cli import app
    from evolora.run import Run

    counter = FlopCounterMode(display=False, custom_mapping=custom_mapping())
    by_phase: dict[str, int] = defaultdict(int)
    state = {"phase": "load", "mark": 0}

    def switch(name: str) -> None:
        total = counter.get_total_flops()
        by_phase[state["phase"]] += total - state["mark"]
        state.update(phase=name, mark=total)

    original = Run.phase

    def phase(self, name: str) -> None:
        switch(name)
        original(self, name)

    Run.phase = phase
    command = ["evolve", args.config, "--out", args.out] + [a for o in args.set for a in ("--set", o)]
    with counter:
        try:
            app(command, standalone_mode=False)
        finally:
            switch("end")  # the last phase (held_out, or fitness) ends with the run: final adapters, verdict
            Run.phase = original
    phases = {name: flops for name, flops in by_phase.items() if flops}
    Path(args.json).write_text(json.dumps({"config": args.config, "set": args.set, "flops": phases}, indent=1))
    for name, flops in phases.items():
        print(f"{name:<10}{flops / 1e12:>10.2f} TFLOP")
    print(f"{'total':<10}{sum(phases.values()) / 1e12:>10.2f} TFLOP -> {args.json}")


def rate(args) -> None:
    """Best GFLOP/s of the packed fp32 GEMMs over ``--rows`` rows at ``--threads`` threads."""
    from evolora.model.prepack import pack_weight, packed_linear, prepack_supported

    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(args.rows, 576, generator=generator)
    best = {}
    for d_out in (1536, 49152):
        weight = torch.randn(d_out, 576, generator=generator) * 0.02
        if prepack_supported(torch.float32):
            packed = pack_weight(weight)
            call = lambda: packed_linear(x, packed, d_out)  # noqa: E731
        else:
            call = lambda: torch.nn.functional.linear(x, weight)  # noqa: E731
        seconds = min(median_seconds(call, 5) for _ in range(args.passes))
        best[d_out] = 2 * args.rows * 576 * d_out / seconds / 1e9
        print(f"{d_out} x 576 over {args.rows} rows, {args.threads} threads: {best[d_out]:.0f} GFLOP/s")
    print(f"best: {max(best.values()):.0f} GFLOP/s")


def quiet_seconds(run: Path) -> dict[str, float]:
    """Seconds per phase summed over a run's steps (metrics.jsonl)."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {
        phase: sum(r["seconds"].get(key, 0.0) for r in records for key in keys)
        for phase, keys in PHASES_OF_STEPS.items()
    }


def floor(args) -> None:
    """Per phase: TFLOP, floor seconds at ``--rate`` GFLOP/s, and a quiet run's seconds beside them."""
    phases = json.loads(Path(args.flops).read_text())["flops"]
    measured = quiet_seconds(Path(args.seconds)) if args.seconds else {}
    print(f"at {args.rate:.0f} GFLOP/s")
    print(f"{'phase':<10}{'TFLOP':>8}{'floor s':>9}{'run s':>8}{'floor/run':>10}")
    for name, flops in phases.items():
        seconds = flops / args.rate / 1e9
        run = measured.get(name)
        tail = f"{run:>8.0f}{seconds / run:>10.2f}" if run else ""
        print(f"{name:<10}{flops / 1e12:>8.2f}{seconds:>9.0f}{tail}")
    total = sum(phases.values())
    print(f"{'total':<10}{total / 1e12:>8.2f}{total / args.rate / 1e9:>9.0f}")
    steps = [name for name in PHASES_OF_STEPS if name in phases and measured.get(name)]
    if steps:
        floor_s = sum(phases[name] for name in steps) / args.rate / 1e9
        print(f"ratio floor/run, the steps ({', '.join(steps)}): {floor_s / sum(measured[n] for n in steps):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("count", help="run the job under FlopCounterMode")
    c.add_argument("config")
    c.add_argument("--out", required=True, help="the run directory (a new one)")
    c.add_argument("--json", required=True, help="where to write {phase: FLOP}")
    c.add_argument("--set", action="append", default=[], help="a config override, as evolora evolve --set")
    r = sub.add_parser("rate", help="this machine's best fp32 GEMM rate")
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--rows", type=int, default=2048)
    r.add_argument("--passes", type=int, default=3)
    f = sub.add_parser("floor", help="the floor seconds per phase")
    f.add_argument("flops", help="the JSON `count` wrote")
    f.add_argument("--rate", type=float, required=True, help="GFLOP/s (from `rate`)")
    f.add_argument("--seconds", help="a quiet run of the same job: its directory (metrics.jsonl)")
    args = parser.parse_args()
    {"count": count, "rate": rate, "floor": floor}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
