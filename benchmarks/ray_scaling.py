"""The population on Ray: driver overhead per step, bytes moved, and modelled scaling to N workers.

Part 1 (measured, ``--model``, tiny-random by default): a 4-teacher + 4-student run on
``run.backend=ray`` with 1, 2 and 4 workers on this machine; per step the driver's overhead
(wall time of its Ray calls not spent computing on the slowest worker: serialisation,
transfer, scheduling, waiting) as a fraction of the step, and the bytes that cross the
process boundary per step (pickled arguments and results of every call, by method).
The fraction is Σ overhead / Σ step time over the ``--steps`` steps after the first (an even
number: evolution.every=2, so half of them evolve, as in the run). Beside it: the round
trips per step and the median wall time of a bare round trip (``ping`` on every worker) in
the same cluster, the floor of what one round trip costs on this machine at this load.

Part 2 (modelled, ``--phase-model``): per-phase seconds of the same 4T+4S step measured
in-process, then the wall time of a step on N workers: the rollout and update phases split
over the workers by slot (8 slots: worker load = ceil(8 / N) / 8), verification,
evolution, matchmaking and ratings stay on the driver, plus the driver overhead fitted to
part 1 (linear in N). Parallel efficiency E(N) = T(1) / (N · T(N)).

    python benchmarks/ray_scaling.py                                   # tiny-random, ~2 min here
    python benchmarks/ray_scaling.py --phase-model smollm2-135m-instruct --threads 2

Source: PopuLoRA (arXiv 2605.16727) §2 (the paper-scale population: 4 teachers, 4 students).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import pickle
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ray  # noqa: E402
import torch  # noqa: E402

from evolora.config import config_from_dict  # noqa: E402
from evolora.distributed import sharded_bank as workers_module  # noqa: E402
from evolora.run import Run  # noqa: E402
from evolora.tasks.toy import ToyTask  # noqa: E402

SLOTS = 8  # 4 teachers + 4 students, no hall of fame


def make_config(model: str, *, backend: str, workers: int, tokens: int, threads: int, steps: int):
    return config_from_dict(
        {
            "model": {"name": model, "num_threads": threads},
            "lora": {"rank": 4, "alpha": 8, "init_b_std": 0.05},
            "population": {"teachers": 4, "students": 4},
            "task": {"name": "toy", "params": {"max_problem_chars": 40}},
            "run": {"steps": steps, "seed": 0, "backend": backend, "workers": workers},
            "selfplay": {
                "proposals_per_teacher": 2,
                "samples_per_problem": 4,
                "roles": {"teacher": {"max_new_tokens": tokens}, "student": {"max_new_tokens": tokens}},
            },
            "learner": {"lr": 1e-2},
            "evolution": {"every": 2, "gamma": 0.25, "crossover_rate": 0.5},
        }
    )


class CountingBank(workers_module.ShardedBank):
    """A ShardedBank that also counts the pickled bytes of every call's arguments (deferred ones
    under their own method) and results, by method."""

    bytes: dict = defaultdict(int)
    methods: dict = {}  # ObjectRef -> method

    def _send(self, worker, method, args):
        for name, *op in self._deferred.get(worker, ()):
            self.bytes[f"{name} to workers"] += len(pickle.dumps(tuple(op)))
        self.bytes[f"{method} to workers"] += len(pickle.dumps(args))
        ref = super()._send(worker, method, args)
        self.methods[ref] = method
        return ref

    def _wait(self, phase, began, refs):
        out = super()._wait(phase, began, refs)
        for worker, ref in refs.items():
            method = self.methods.pop(ref, "ping")  # the start-up ping is sent directly
            self.bytes[f"{method} from workers"] += len(pickle.dumps(out[worker]))
        return out


class TripCountingBank(workers_module.ShardedBank):
    """A ShardedBank that counts its round trips (calls it waits for); nothing else added."""

    trips = 0

    def _wait(self, phase, began, refs):
        TripCountingBank.trips += 1
        return super()._wait(phase, began, refs)


def round_trip_seconds(bank, calls: int = 40) -> float:
    """Median wall time of one bare round trip: ``ping`` on every worker at once, waited for."""
    times = []
    for _ in range(calls):
        began = time.perf_counter()
        ray.get([actor.ping.remote() for actor in bank.actors])
        times.append(time.perf_counter() - began)
    return statistics.median(times)


@contextlib.contextmanager
def sharded_bank(cls):
    """Runs built inside this block hold a ``cls`` (a :class:`ShardedBank` subclass that records its
    calls) instead of the library's bank; the library's is back afterwards, even on an error."""
    real, workers_module.ShardedBank = workers_module.ShardedBank, cls
    try:
        yield
    finally:
        workers_module.ShardedBank = real


def measure_ray(args, workers: int) -> dict:
    """Mean step seconds and driver overhead (their ratio: Σ overhead / Σ step), the median of the
    per-step ratios, median per-worker phase seconds and the round trips per step of ``args.steps``
    steps after the first, and a bare round trip."""
    config = make_config(
        args.model, backend="ray", workers=workers, tokens=args.tokens, threads=args.threads, steps=args.steps + 1
    )
    with sharded_bank(TripCountingBank), tempfile.TemporaryDirectory() as out:
        run = Run(config, out, task=ToyTask(max_problem_chars=40))
        run.run_step()  # the first step warms the workers up
        TripCountingBank.trips = 0
        records = [run.run_step()[0] for _ in range(args.steps)]
        trips = TripCountingBank.trips / args.steps
        bare = round_trip_seconds(run.bank)
        run.close()
    totals = [r["seconds"]["total"] for r in records]
    overheads = [r["seconds"]["driver_overhead"] for r in records]
    busy = {
        w: {p: statistics.median(r["workers"][w][p] for r in records) for p in ("rollout", "update")}
        for w in records[0]["workers"]
    }
    return {
        "total": statistics.mean(totals),
        "overhead": statistics.mean(overheads),
        "fraction": sum(overheads) / sum(totals),
        "median_fraction": statistics.median(o / t for o, t in zip(overheads, totals)),
        "workers": busy,
        "trips": trips,
        "bare": bare,
    }


def measure_bytes(args) -> tuple[dict, int]:
    """Bytes of steps 2 and 3 by method at 2 workers (step 2 evolves), and of one checkpoint."""
    config = make_config(args.model, backend="ray", workers=2, tokens=args.tokens, threads=args.threads, steps=3)
    with sharded_bank(CountingBank), tempfile.TemporaryDirectory() as out:
        run = Run(config, out, task=ToyTask(max_problem_chars=40))
        run.run_step()
        CountingBank.bytes.clear()
        run.run_step()
        run.run_step()  # step 2 evolves (evolution.every=2): factors move through the object store
        moved = dict(CountingBank.bytes)
        CountingBank.bytes.clear()
        run.save_checkpoint()  # gathers every slot's factors and optimizer state
        checkpoint = sum(CountingBank.bytes.values())
        run.close()
    return moved, checkpoint


def phase_seconds(args) -> dict[str, float]:
    """Median per-phase seconds of an in-process 4T+4S step of ``--phase-model`` (steps after the first)."""
    config = make_config(
        args.phase_model,
        backend="local",
        workers=1,
        tokens=args.tokens,
        threads=args.threads,
        steps=args.phase_steps + 1,
    )
    with tempfile.TemporaryDirectory() as out:
        run = Run(config, out, task=ToyTask(max_problem_chars=40))
        records = [run.run_step()[0] for _ in range(args.phase_steps + 1)][1:]
    phases = ("rollout_teacher", "verify", "rollout_student", "train", "evolve", "total")
    return {p: statistics.mean(r["seconds"][p] for r in records) for p in phases}  # mean: evolve runs every 2nd step


def model_wall(phases: dict, overhead_fit: tuple[float, float], workers: int) -> float:
    """Modelled seconds of one step on ``workers`` workers (see the module docstring)."""
    parallel = phases["rollout_teacher"] + phases["rollout_student"] + phases["train"]
    serial = phases["total"] - parallel  # verify, evolution, matchmaking, ratings, records
    load = math.ceil(SLOTS / workers) / SLOTS
    intercept, slope = overhead_fit
    return parallel * load + serial + max(0.0, intercept + slope * workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-random")
    parser.add_argument("--phase-model", default=None, help="model of the modelled step (default: --model)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--steps", type=int, default=8, help="measured steps after the first (even: half evolve)")
    parser.add_argument("--phase-steps", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--num-cpus", type=int, default=2)
    args = parser.parse_args()
    args.phase_model = args.phase_model or args.model
    torch.set_num_threads(args.threads)
    began = time.perf_counter()
    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    measured = {n: measure_ray(args, n) for n in args.workers}
    moved, checkpoint = measure_bytes(args)
    steps = 2
    ray.shutdown()
    print(
        f"measured: {args.model}, 4T+4S, {args.tokens} new tokens, Ray num_cpus={args.num_cpus}, "
        f"{args.steps} steps after the first (half of them evolve); means, overhead / step = sum over sum"
    )
    print(
        "| workers | step s | driver overhead s | overhead / step | median step's ratio | round trips / step "
        "| bare round trip ms | per worker (medians): rollout s, update s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n, m in measured.items():
        busy = "; ".join(f"{w} {v['rollout']:.3f}, {v['update']:.3f}" for w, v in m["workers"].items())
        print(
            f"| {n} | {m['total']:.3f} | {m['overhead']:.4f} | {m['fraction']:.1%} | {m['median_fraction']:.1%} "
            f"| {m['trips']:.1f} | {m['bare'] * 1e3:.2f} | {busy} |"
        )
    print(f"\nbytes per step across the process boundary (2 workers, mean of {steps} steps, one of them evolving):")
    for key in sorted(k for k, v in moved.items() if v / steps >= 50):
        print(f"  {key:32s} {moved[key] / steps / 1024:9.1f} KiB")
    print(f"  {'total':32s} {sum(moved.values()) / steps / 1024:9.1f} KiB")
    print(f"  {'one checkpoint (factors + Adam)':32s} {checkpoint / 1024:9.1f} KiB")
    points = [(n, m["overhead"]) for n, m in measured.items()]
    mean_n, mean_o = statistics.mean(n for n, _ in points), statistics.mean(o for _, o in points)
    spread = sum((n - mean_n) ** 2 for n, _ in points)
    slope = sum((n - mean_n) * (o - mean_o) for n, o in points) / spread if spread else 0.0
    fit = (mean_o - slope * mean_n, slope)
    phases = phase_seconds(args)
    print(
        f"\nmodelled: {args.phase_model}, in-process 4T+4S step phases (s): "
        + ", ".join(f"{k} {v:.3f}" for k, v in phases.items())
    )
    print(f"driver overhead fit: {fit[0]:.3f} + {fit[1]:.4f} * N s")
    print("| workers | modelled step s | speedup | parallel efficiency |")
    print("|---|---|---|---|")
    one = model_wall(phases, fit, 1)
    for n in (1, 2, 4, 8):
        wall = model_wall(phases, fit, n)
        print(f"| {n} | {wall:.3f} | {one / wall:.2f}x | {one / (n * wall):.2f} |")
    two = measured.get(2)
    if two:
        print(f"\nratio driver overhead / step time at 2 workers: {two['fraction']:.3f}")
    print(f"done in {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
