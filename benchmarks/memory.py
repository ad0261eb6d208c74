"""Peak memory against the number of adapters: it should grow by the adapters, not by model copies.

Each count N runs in a fresh subprocess (peak RSS never goes down inside one process) that
loads the base once, builds an :class:`AdapterBank` with N slots, does one routed rollout
of a fixed batch spread over the N adapters and one ``policy_update_many`` of all N
adapters (``--samples`` samples each, = the micro-batch, so every chunk has the same rows and activation memory does not
depend on N), then reports its peak RSS (``VmHWM`` from /proc/self/status).

The increment per adapter is the least-squares slope of peak RSS over N. What one adapter
should cost (fp32): its factors (``bank.num_parameters()`` floats; 2.44 M = 9.8 MB for
SmolLM2 rank 8) + their gradients (1x) + AdamW's two moments (2x) = 4x the factors.
The ratio line compares the slope with that 4x; a model copy would add the whole base.

    python benchmarks/memory.py --model smollm2-135m-instruct --adapters 1 2 4 8 16 --threads 2
    python benchmarks/memory.py --model tiny-random --adapters 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB (VmHWM)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(args) -> None:
    """Measure one adapter count and print one JSON line."""
    import torch

    from evolora.bank.local import AdapterBank
    from evolora.generation.rollout import chat_prompt
    from evolora.generation.types import Sampling
    from evolora.learner import Sample, make_optimizer, policy_update_many
    from evolora.model import load_base

    torch.set_num_threads(args.threads)
    model, tokenizer = load_base(args.model, dtype=args.dtype)
    base_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    after_load = peak_rss_mb()
    slots = [f"A{i}" for i in range(args.child)]
    bank = AdapterBank(model, slots, rank=args.rank, alpha=2 * args.rank, target_modules=MODULES, tokenizer=tokenizer)
    generator = torch.Generator().manual_seed(0)
    for slot in slots:
        bank.init_factors(slot, generator, b_std=1e-3)
    prompt = chat_prompt(tokenizer, [{"role": "user", "content": "What is 3+4?"}])
    rows = max(args.batch, len(slots))
    names = [slots[i % len(slots)] for i in range(rows)]
    model.generation_config.min_new_tokens = args.tokens
    bank.rollout([prompt] * rows, names, Sampling(max_new_tokens=args.tokens), batch_size=args.batch)
    after_rollout = peak_rss_mb()
    completion = tuple(5 + (j % 90) for j in range(args.tokens))
    jobs = {
        slot: (
            make_optimizer(bank.parameters(slot), lr=1e-5, weight_decay=0.0),
            [Sample(tuple(prompt), completion, float(i % 2), "g") for i in range(args.samples)],
        )
        for slot in slots
    }
    policy_update_many(bank, jobs, micro_batch=args.micro_batch)
    print(
        json.dumps(
            {
                "adapters": len(slots),
                "adapter_floats": bank.num_parameters(),
                "base_mb": base_bytes / 2**20,
                "after_load_mb": after_load,
                "after_rollout_mb": after_rollout,
                "peak_mb": peak_rss_mb(),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--adapters", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--batch", type=int, default=16, help="rollout rows (spread over the adapters)")
    parser.add_argument("--tokens", type=int, default=16, help="new tokens per rollout row and completion length")
    parser.add_argument(
        "--samples",
        type=int,
        default=4,
        help="training samples per adapter (= micro-batch, so every chunk has the same rows for any N)",
    )
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    rows = []
    for count in args.adapters:
        command = [sys.executable, os.path.abspath(__file__), "--child", str(count)] + [
            f"--{key.replace('_', '-')}={value}"
            for key, value in vars(args).items()
            if key not in ("adapters", "child")
        ]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            sys.exit(f"child for {count} adapters failed:\n{done.stderr[-3000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))

    adapter_mb = rows[0]["adapter_floats"] * 4 / 2**20  # fp32 factors (also under a bf16 base)
    expected_mb = 4 * adapter_mb  # factors + gradients + AdamW exp_avg + exp_avg_sq
    print(
        f"\nPeak RSS: {args.model} ({args.dtype}), base weights {rows[0]['base_mb']:.0f} MB, one adapter "
        f"{rows[0]['adapter_floats'] / 1e6:.2f} M floats = {adapter_mb:.1f} MB "
        f"(+ grads + Adam = {expected_mb:.1f} MB)"
    )
    print(f"{'adapters':>8}{'after load':>12}{'after rollout':>15}{'peak':>10}{'vs N=' + str(rows[0]['adapters']):>10}")
    for row in rows:
        print(
            f"{row['adapters']:>8}{row['after_load_mb']:>12.0f}{row['after_rollout_mb']:>15.0f}"
            f"{row['peak_mb']:>10.0f}{row['peak_mb'] - rows[0]['peak_mb']:>+10.0f}"
        )
    xs = [row["adapters"] for row in rows]
    ys = [row["peak_mb"] for row in rows]
    if len(rows) > 1:
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)
        print(
            f"increment per adapter (least-squares slope): {slope:.1f} MB; a model copy would be "
            f"{rows[0]['base_mb']:.0f} MB"
        )
        print(f"ratio increment per adapter / (factors + grads + Adam): {slope / expected_mb:.2f}x (target ~1x)")


if __name__ == "__main__":
    main()
