"""The routed LoRA's two inference layouts side by side: gather + batched matmuls against the dense
layout (one matmul over every used adapter's A's and a row mask), per group shape and batch.

Prints, per SmolLM2-135M group (q/k/v, gate/up, o) and rows × tokens, the best-of-rounds µs of one
shrink + expand of each layout (interleaved, so load swings hit both alike) and dense / gathered:
the measurement behind ``evolora.generation.lora_stack.DENSE_ROWS``.

    OMP_NUM_THREADS=1 python benchmarks/lora_layout.py --threads 1
"""

from __future__ import annotations

import argparse
import time

import torch

import evolora.generation.lora_stack as lora_stack
from evolora.generation.lora_stack import GatheredStack, RowPlan

GROUPS = {"q/k/v": (576, 192, 192), "gate/up": (1536, 1536), "o": (576,)}
"""SmolLM2-135M's sibling groups: output widths; every input is 576 wide."""
SHAPES = ((8, 1), (16, 1), (32, 1), (64, 1), (128, 1), (8, 4), (8, 16))
"""(rows, tokens) per call: decoding steps, then short multi-token calls."""


def best_microseconds(call, calls: int = 300, rounds: int = 5) -> float:
    """The best over ``rounds`` of the mean µs of ``calls`` calls (after 20 untimed ones)."""
    for _ in range(20):
        call()
    best = float("inf")
    for _ in range(rounds):
        began = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - began) / calls)
    return best * 1e6


def layout_call(a, b, slots, x, outs):
    """One shrink + expand of every sibling, in the layout :data:`lora_stack.DENSE_ROWS` picks now."""
    plan = RowPlan(slots, sorted(set(slots.tolist())), a[0][0].shape[0], 2.0)
    stack = GatheredStack(a, b, plan)

    def call() -> None:
        pieces = stack.shrink(x, x.shape[1])
        for j, out in enumerate(outs):
            stack.expand_(out, pieces[j], j)

    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--adapters", type=int, default=4)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="one shape, few calls (smoke test)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    shapes, calls = ((SHAPES[0],), 5) if args.quick else (SHAPES, 300)
    print(f"{args.adapters} adapters, rank {args.rank}, fp32, {args.threads} thread(s)")
    first = None
    print(f"{'group':<9}{'rows':>5}{'tokens':>7}{'gathered µs':>13}{'dense µs':>10}{'dense/gathered':>16}")
    for group, widths in GROUPS.items():
        a = [[torch.randn(args.rank, 576, generator=generator) for _ in widths] for _ in range(args.adapters)]
        b = [[torch.randn(w, args.rank, generator=generator) for w in widths] for _ in range(args.adapters)]
        for rows, tokens in shapes:
            slots = torch.arange(rows) % args.adapters
            x = torch.randn(rows, tokens, 576, generator=generator)
            outs = [torch.randn(rows, tokens, w, generator=generator) for w in widths]
            times: dict[str, float] = {"gathered": float("inf"), "dense": float("inf")}
            for _ in range(2):  # interleaved rounds
                for name, limit in (("gathered", 0), ("dense", 10**9)):
                    lora_stack.DENSE_ROWS = limit
                    call = layout_call(a, b, slots, x, outs)
                    times[name] = min(times[name], best_microseconds(call, calls, 2 if args.quick else 5))
            ratio = times["dense"] / times["gathered"]
            first = ratio if first is None else first
            print(f"{group:<9}{rows:>5}{tokens:>7}{times['gathered']:>13.0f}{times['dense']:>10.0f}{ratio:>16.2f}")
    print(f"ratio dense/gathered, q/k/v, {shapes[0][0]} rows × {shapes[0][1]} token: {first:.2f}")


if __name__ == "__main__":
    main()
