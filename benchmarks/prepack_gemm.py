"""The decoder's linear shapes at decoding batch sizes: ``F.linear``, the transposed product
``(W xᵀ)ᵀ`` the eager decode uses for wide layers, and the oneDNN-packed GEMM of ``model.prepack``.

Each shape is timed over 30 distinct random weights (as 30 layers stream from memory, not from a
cache), the paths interleaved, best of 5 rounds; µs per call and packed / ``F.linear``. The figures
behind ``evolora.model.prepack.AUTO_MIN_LAYER_WEIGHTS``.

    OMP_NUM_THREADS=1 python benchmarks/prepack_gemm.py --threads 1
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from evolora.model.prepack import pack_weight, packed_linear, prepack_supported

SHAPES = {"q/o": (576, 576), "k/v": (192, 576), "gate/up": (1536, 576), "down": (576, 1536)}
"""SmolLM2-135M's decoder linears: (d_out, d_in)."""


def per_call_microseconds(calls, rounds: int = 5) -> float:
    """The best over ``rounds`` of one pass over ``calls`` (after one untimed pass), µs per call."""
    for call in calls:
        call()
    best = float("inf")
    for _ in range(rounds):
        began = time.perf_counter()
        for call in calls:
            call()
        best = min(best, (time.perf_counter() - began) / len(calls))
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=8, help="rows of x (a decoding step's batch)")
    parser.add_argument("--layers", type=int, default=30, help="distinct weights per shape")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not prepack_supported(torch.float32):
        raise SystemExit("this CPU/torch cannot pack float32 weights (model.prepack falls back to F.linear)")
    generator = torch.Generator().manual_seed(0)
    print(f"fp32, M = {args.rows}, {args.layers} weights per shape, {args.threads} thread(s)")
    print(f"{'layer':<9}{'F.linear µs':>12}{'(W xᵀ)ᵀ µs':>12}{'packed µs':>11}{'packed/F.linear':>17}")
    ratios = {}
    for name, (d_out, d_in) in SHAPES.items():
        weights = [torch.randn(d_out, d_in, generator=generator) for _ in range(args.layers)]
        packed = [pack_weight(w) for w in weights]
        x = torch.randn(args.rows, d_in, generator=generator)
        paths = {
            "linear": [lambda w=w: F.linear(x, w) for w in weights],
            "skinny": [lambda w=w: torch.mm(w, x.t()).t().contiguous() for w in weights],
            "packed": [lambda p=p: packed_linear(x, p, d_out) for p in packed],
        }
        best = {key: float("inf") for key in paths}
        for _ in range(2):  # interleaved rounds
            for key, calls in paths.items():
                best[key] = min(best[key], per_call_microseconds(calls))
        ratios[name] = best["packed"] / best["linear"]
        print(f"{name:<9}{best['linear']:>12.0f}{best['skinny']:>12.0f}{best['packed']:>11.0f}{ratios[name]:>17.2f}")
    print("ratio packed/F.linear: " + ", ".join(f"{name} {ratio:.2f}" for name, ratio in ratios.items()))


if __name__ == "__main__":
    main()
