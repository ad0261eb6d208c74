"""Where the driver overhead of a Ray step goes: per waited call, the driver's wall
time against the slowest worker's self-timed seconds, and Ray's own task timeline
(``ray.timeline()``: submission, argument deserialisation, execution, output storing).

Same run as ``ray_scaling.py`` (tiny-random, 4 teachers + 4 students, toy task, 12 new
tokens, ``evolution.every=2``), one step to warm up, then ``--steps`` measured steps.

    python benchmarks/ray_profile.py --workers 2

Source: PopuLoRA (arXiv 2605.16727) §2 (the step whose phases are timed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ray  # noqa: E402
from ray_scaling import make_config, sharded_bank  # noqa: E402

import evolora.distributed.sharded_bank as workers_module  # noqa: E402
from evolora.run import Run  # noqa: E402
from evolora.tasks.toy import ToyTask  # noqa: E402

CALLS: list[dict] = []


class TimedBank(workers_module.ShardedBank):
    """A ShardedBank that records, per waited call, submission and waiting milliseconds and the
    slowest worker's own seconds."""

    def _wait(self, phase, began, refs):
        waiting = time.perf_counter()
        out = super()._wait(phase, began, refs)
        busy = max((value[-1] for value in out.values()), default=0.0) if phase else 0.0
        CALLS.append(
            {
                "phase": phase or "other",
                "submit": (waiting - began) * 1e3,
                "wait": (time.perf_counter() - waiting) * 1e3,
                "busy": busy * 1e3,
            }
        )
        return out


def profile(workers: int, steps: int) -> tuple[list[dict], list[dict], list[dict]]:
    """The step records, the calls and Ray's timeline events of ``steps`` measured steps."""
    config = make_config("tiny-random", backend="ray", workers=workers, tokens=12, threads=1, steps=steps + 1)
    with sharded_bank(TimedBank), tempfile.TemporaryDirectory() as out:
        run = Run(config, out, task=ToyTask(max_problem_chars=40))
        run.run_step()
        CALLS.clear()
        start = time.time()
        records = [run.run_step()[0] for _ in range(steps)]
        end = time.time()
        events = [e for e in ray.timeline() if e.get("ph") == "X" and start <= e["ts"] / 1e6 <= end]
        run.close()
    return records, list(CALLS), events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8, help="measured steps after the first (even: half evolve)")
    args = parser.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    records, calls, events = profile(args.workers, args.steps)
    ray.shutdown()
    total = sum(r["seconds"]["total"] for r in records)
    overhead = sum(r["seconds"]["driver_overhead"] for r in records)
    print(
        f"{args.workers} workers, {args.steps} steps: {total * 1e3 / args.steps:.1f} ms a step, driver overhead "
        f"{overhead * 1e3 / args.steps:.1f} ms ({overhead / total:.1%})"
    )
    print(
        "| waited call | calls / step | submit ms | wait ms | slowest worker ms | overhead ms / call | overhead ms / step |"
    )
    print("|---|---|---|---|---|---|---|")
    by_phase = defaultdict(list)
    for call in calls:
        by_phase[call["phase"]].append(call)
    for phase, group in by_phase.items():
        mean = {k: statistics.mean(c[k] for c in group) for k in ("submit", "wait", "busy")}
        per_call = mean["submit"] + mean["wait"] - mean["busy"]
        print(
            f"| {phase} | {len(group) / args.steps:.1f} | {mean['submit']:.2f} | {mean['wait']:.2f} | "
            f"{mean['busy']:.2f} | {per_call:.2f} | {per_call * len(group) / args.steps:.2f} |"
        )
    print("Ray timeline (ms a step, events a step):")
    spent, count = defaultdict(float), defaultdict(int)
    for event in events:
        spent[event["cat"]] += event["dur"] / 1e3
        count[event["cat"]] += 1
    for name in sorted(spent, key=lambda k: -spent[k]):
        print(f"  {name:40s} {spent[name] / args.steps:8.2f}  {count[name] / args.steps:5.1f}")


if __name__ == "__main__":
    main()
