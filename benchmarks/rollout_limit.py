"""Rollout speed against the memory-bound limit of this machine, and a gsm run's peak RSS.

One process measures, side by side (interleaved rounds; read the ratios, the machine is shared):
  * read bandwidth: ``torch.sum`` over 256 MB (the best of several passes);
  * the limit: (best bandwidth) / (fp32 bytes of the base weights) × batch, in tokens/s — a
    decode step has to stream every weight once, whatever the batch;
  * tokens/s of one batch of gsm teacher prompts (end to end, and decode only: the median of
    the decode steps, each timed between two LM-head calls): ``transformers``' ``generate`` on the bare
    base, ``generate`` with evolora's routed hooks (the engine before ``evolora.generation.decode``),
    evolora's ``generate`` (routed, preallocated cache) on the bare base and with 1, 4 and 8
    adapters, and PEFT ``adapter_names`` (4 adapters) — each as a fraction of the limit and of
    the bare base in the same engine;
  * the peak RSS and step seconds of a 2-step default gsm run (``evolora evolve tasks/gsm.yaml``
    in a subprocess, read from its metrics.jsonl).

    python benchmarks/rollout_limit.py --threads 2 --batch 8 --tokens 48
    python benchmarks/rollout_limit.py --quick     # tiny random model, seconds (smoke test)
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from _timing import median_seconds  # benchmarks/_timing.py (scripts run from benchmarks/)

from evolora.bank.local import AdapterBank
from evolora.generation.engine import PeftEngine
from evolora.generation.rollout import chat_prompt
from evolora.generation.routed import BASE, routed
from evolora.generation.types import Sampling
from evolora.model import load_base
from evolora.selfplay import proposal_request
from evolora.tasks import make_task

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ROOT = Path(__file__).resolve().parent.parent


def read_bandwidth(megabytes: int = 256, passes: int = 5) -> float:
    """Best read bandwidth in GB/s of ``torch.sum`` over a ``megabytes`` fp32 buffer."""
    buffer = torch.ones(megabytes * 2**20 // 4)
    buffer.sum()
    return max(buffer.numel() * 4 / median_seconds(buffer.sum, 1, warmup=False) / 1e9 for _ in range(passes))


def weight_bytes(model) -> int:
    """Bytes of the base weights a decode step streams (tied embeddings counted once)."""
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    return sum(seen.values())


def teacher_prompts(tokenizer, count: int, cap: int) -> list[list[int]]:
    """``count`` gsm teacher prompts (chat template + forced prefix), the last ``cap`` tokens (0: all)."""
    task = make_task("gsm")
    prompts = []
    for i in range(count):
        request = proposal_request(task, random.Random(i))
        ids = chat_prompt(tokenizer, request.messages, request.prefix)
        prompts.append(ids[-cap:] if cap else ids)
    return prompts


def hf_generate(bank, tokenizer, prompts, names, tokens, hooks: bool):
    """``transformers``' ``generate`` on one left-padded batch: the bare base (adapters off) or
    with evolora's routed hooks (the rollout engine before :mod:`evolora.generation.decode`)."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
    attention = (torch.arange(width) >= torch.tensor([width - len(p) for p in prompts])[:, None]).long()
    context = routed(bank, names) if hooks else bank.model.disable_adapter()
    with torch.no_grad(), context:
        bank.model.generate(
            input_ids=ids,
            attention_mask=attention,
            max_new_tokens=tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )


def gsm_run(quick: bool) -> dict:
    """Peak RSS (MB) and mean step seconds of a 2-step default gsm run in a fresh process."""
    overrides = ["run.steps=2"]
    if quick:
        overrides += [
            "model.name=tiny-random",
            "task.params.problem_tokens=4",
            "task.params.program_tokens=4",
            "selfplay.roles.student.max_new_tokens=4",
            "selfplay.proposals_per_teacher=1",
        ]
    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable,
            "-c",
            "from evolora.cli import app; app()",
            "evolve",
            str(ROOT / "tasks" / "gsm.yaml"),
            "--no-eval",
            "--out",
            f"{out}/run",
        ] + [arg for o in overrides for arg in ("--set", o)]
        subprocess.run(command, check=True, capture_output=True, text=True, cwd=ROOT)
        records = [json.loads(line) for line in Path(out, "run", "metrics.jsonl").read_text().splitlines()]
    return {
        "peak_rss_mb": max(r["peak_rss_mb"] for r in records),
        "step_seconds": statistics.mean(r["seconds"]["total"] for r in records),
    }


class StepClock:
    """Timestamps of every LM-head call (one per forward: the prefill, then each decode step)."""

    def __init__(self, model) -> None:
        self.stamps: list[float] = []
        head = model.get_output_embeddings()
        self.handle = head.register_forward_hook(lambda *_: self.stamps.append(time.perf_counter()))

    def time(self, call) -> tuple[float, float, list[float]]:
        """(total seconds, prefill seconds, decode step seconds) of one ``call()``."""
        self.stamps.clear()
        began = time.perf_counter()
        call()
        total = time.perf_counter() - began
        return total, self.stamps[0] - began, [b - a for a, b in zip(self.stamps, self.stamps[1:])]


def measure(args) -> None:
    model, tokenizer = load_base(args.model, prepack=args.prepack)
    weights = weight_bytes(model)
    slots = [f"A{i}" for i in range(max(args.adapters))]
    bank = AdapterBank(model, slots, rank=8, alpha=16, target_modules=MODULES, tokenizer=tokenizer)
    peft = PeftEngine(bank.model, tokenizer, bank)
    generator = torch.Generator().manual_seed(0)
    for slot in slots:
        bank.init_factors(slot, generator, b_std=1e-3)
    prompts = teacher_prompts(tokenizer, args.batch, args.prompt_tokens)
    model.generation_config.min_new_tokens = args.tokens  # every row generates exactly --tokens
    spread = {p: [slots[i % p] for i in range(args.batch)] for p in args.adapters}
    most = max(args.adapters)

    def ours(names, routed_rows=True, tokens=args.tokens):
        engine = bank.engine if routed_rows else peft
        return lambda: engine.generate(
            prompts, names, Sampling(max_new_tokens=tokens, greedy=True), batch_size=args.batch
        )

    calls = {
        "HF generate, bare base": lambda: hf_generate(bank, tokenizer, prompts, None, args.tokens, False),
        f"HF generate + routed hooks, {most} ad.": lambda: hf_generate(
            bank, tokenizer, prompts, spread[most], args.tokens, True
        ),
        "evolora, bare base": ours([BASE] * args.batch),
    }
    calls.update({f"evolora routed, {p} adapters": ours(spread[p]) for p in args.adapters})
    calls[f"PEFT adapter_names, {most} ad."] = ours(spread[most], False)
    bandwidth = [read_bandwidth()]
    clock = StepClock(model)
    for call in calls.values():
        call()  # warm-up
    # Round robin, so load swings hit every path alike; decode steps are timed one by one.
    timings: dict[str, list[tuple[float, float, list[float]]]] = {name: [] for name in calls}
    for _ in range(args.repeats):
        for name, call in calls.items():
            timings[name].append(clock.time(call))
        bandwidth.append(read_bandwidth(passes=2))
    clock.handle.remove()
    report(args, weights, timings, max(bandwidth), prompts)
    if args.profile:
        names = spread[4 if 4 in spread else most]
        profile(ours(names, tokens=2), ours(names), args.tokens - 2)


def report(args, weights, timings, bandwidth, prompts) -> None:
    """Per path: best total and prefill seconds over rounds, median decode step -> tokens/s."""
    limit = bandwidth * 1e9 / weights * args.batch
    step = {name: statistics.median(s for _, _, steps in runs for s in steps) for name, runs in timings.items()}
    base = step["evolora, bare base"]
    print(
        f"\nRollouts: {args.model} fp32, batch {args.batch}, prompts {min(map(len, prompts))}-"
        f"{max(map(len, prompts))} tokens, {args.tokens} new tokens, {args.threads} threads, "
        f"{args.repeats} interleaved rounds (totals: best round; decode: median step), prepack {args.prepack}"
    )
    print(
        f"read bandwidth {bandwidth:.1f} GB/s, base weights {weights / 1e9:.3f} GB, "
        f"limit {limit:.0f} tokens/s ({1e3 * args.batch / limit:.1f} ms per decode step)"
    )
    print(
        f"{'path':<36}{'total s':>8}{'prefill s':>10}{'tok/s':>8}{'step ms':>8}{'decode tok/s':>13}"
        f"{'of limit':>9}{'vs base':>8}"
    )
    for name, runs in timings.items():
        total, prefill = min(r[0] for r in runs), min(r[1] for r in runs)
        rate = args.batch / step[name]
        print(
            f"{name:<36}{total:>8.2f}{prefill:>10.2f}{args.batch * args.tokens / total:>8.1f}"
            f"{1e3 * step[name]:>8.1f}{rate:>13.1f}{rate / limit:>9.2f}{base / step[name]:>8.2f}"
        )
    if args.rss:
        run = gsm_run(args.quick)
        print(f"gsm run, 2 steps: peak RSS {run['peak_rss_mb']:.0f} MB, {run['step_seconds']:.1f} s per step")
    mixed = [n for n in timings if n.startswith("evolora routed")][-1]
    print(f"ratio {mixed} decode / limit: {args.batch / step[mixed] / limit:.2f}")


def profile(short, long, steps: int) -> None:
    """The operators of one decode step (self CPU time): a routed generate call of 2 new tokens and
    one of ``--tokens``, each profiled, their difference over the ``steps`` decode steps between them
    (so the prefill drops out); the wall time per step beside it (what the ops leave is Python)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    tables, walls = [], []
    for call in (short, long):
        call()  # warm-up
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            began = time.perf_counter()
            call()
            walls.append(time.perf_counter() - began)
        tables.append({e.key: (e.self_cpu_time_total, e.count) for e in prof.key_averages()})
    short_ops, long_ops = tables
    delta = {
        op: (us - short_ops.get(op, (0, 0))[0], count - short_ops.get(op, (0, 0))[1])
        for op, (us, count) in long_ops.items()
    }
    ops_ms = sum(us for us, _ in delta.values()) / steps / 1e3
    wall_ms = (walls[1] - walls[0]) / steps * 1e3
    print(f"\none decode step: {wall_ms:.1f} ms wall under the profiler, {ops_ms:.1f} ms in operators")
    print(f"{'operator':<52}{'ms/step':>9}{'calls/step':>11}{'µs/call':>9}")
    for op, (us, count) in sorted(delta.items(), key=lambda item: -item[1][0])[:14]:
        print(f"{op:<52}{us / steps / 1e3:>9.2f}{count / steps:>11.0f}{us / max(count, 1):>9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--adapters", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per row (min = max), >= 2")
    parser.add_argument("--prompt-tokens", type=int, default=0, help="keep the last N prompt tokens (0: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--prepack",
        type=lambda v: {"true": True, "false": False}.get(v, v),
        choices=["auto", True, False],
        default="auto",
        help="model.prepack for the measured model (auto: what a run uses; false: F.linear everywhere)",
    )
    parser.add_argument("--no-rss", dest="rss", action="store_false", help="skip the 2-step gsm run")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="print the operators of one decode step (torch.profiler, prefill excluded)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny random model, tiny sizes (smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.model, args.batch, args.tokens, args.prompt_tokens, args.repeats = "tiny-random", 4, 4, 48, 1
    torch.set_num_threads(args.threads)
    began = time.perf_counter()
    measure(args)
    print(f"({time.perf_counter() - began:.0f} s)")


if __name__ == "__main__":
    main()
