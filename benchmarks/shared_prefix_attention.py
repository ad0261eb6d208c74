"""Decode attention over a shared prompt: each row's own copy of the prompt's K/V vs one copy per prompt.

A student's samples of one problem share its prompt, and the rollout engine copies the prompt's
K/V cache to every sample's row (:mod:`evolora.generation.decode`). This script times one decode
step's attention over 30 layers of SmolLM2-135M's shapes (3 key/value heads, 3 query heads each,
head dim 64, fp32, every layer's cache in its own buffers, so they stream from memory) two ways,
interleaved:

* ``full``: CPU flash attention of each row's query over its row's whole cache (prompt + suffix);
* ``shared``: the prompt's K/V held once per prompt (the queries of its samples attend to it as one
  batch), each row's own suffix apart, the two partial softmaxes merged by their log-sum-exp.

It checks the two agree (max |difference|) and prints the median times and their ratio.

    python benchmarks/shared_prefix_attention.py --threads 2 --prompts 4 --samples 8 --prefix 120 --suffix 45
"""

from __future__ import annotations

import argparse
import statistics

import torch
from _timing import median_seconds  # benchmarks/ (scripts run from there)

HEADS, GROUP, DIM, LAYERS, SCALE = 3, 3, 64, 30, 0.125
flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def caches(prompts: int, samples: int, prefix: int, suffix: int, generator: torch.Generator):
    """Per layer: the rows' full K/V (B, H, prefix + suffix, D) with each prompt's rows sharing their
    first ``prefix`` positions, and the same split as one prefix per prompt plus each row's suffix."""
    rows = prompts * samples
    layers = []
    for _ in range(LAYERS):
        parts = {}
        for name in ("k", "v"):
            shared = torch.randn(prompts, HEADS, prefix, DIM, generator=generator)
            own = torch.randn(rows, HEADS, suffix, DIM, generator=generator)
            full = torch.cat([shared.repeat_interleave(samples, dim=0), own], dim=2)
            parts[name] = (full, shared, own)
        layers.append(parts)
    return layers


def full_attention(q: torch.Tensor, layers) -> list[torch.Tensor]:
    """(B, H, G, D) outputs per layer: each row over its own whole cache."""
    return [flash(q, layer["k"][0], layer["v"][0], scale=SCALE)[0] for layer in layers]


def shared_attention(q: torch.Tensor, layers, prompts: int, samples: int) -> list[torch.Tensor]:
    """(B, H, G, D) outputs per layer: the prompts' K/V once each, the rows' suffixes apart, merged."""
    rows = prompts * samples
    grouped = q.view(prompts, samples, HEADS, GROUP, DIM).transpose(1, 2).reshape(prompts, HEADS, samples * GROUP, DIM)
    outputs = []
    for layer in layers:
        out_p, lse_p = flash(grouped, layer["k"][1], layer["v"][1], scale=SCALE)
        out_p = out_p.view(prompts, HEADS, samples, GROUP, DIM).transpose(1, 2).reshape(rows, HEADS, GROUP, DIM)
        lse_p = lse_p.view(prompts, HEADS, samples, GROUP).transpose(1, 2).reshape(rows, HEADS, GROUP)
        out_s, lse_s = flash(q, layer["k"][2], layer["v"][2], scale=SCALE)
        top = torch.maximum(lse_p, lse_s)
        w_p, w_s = (lse_p - top).exp_(), (lse_s - top).exp_()
        outputs.append((out_p * w_p[..., None] + out_s * w_s[..., None]) / (w_p + w_s)[..., None])
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8, help="rows per prompt")
    parser.add_argument("--prefix", type=int, default=120, help="prompt positions")
    parser.add_argument("--suffix", type=int, default=45, help="each row's own positions (generated so far)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    layers = caches(args.prompts, args.samples, args.prefix, args.suffix, generator)
    q = torch.randn(args.prompts * args.samples, HEADS, GROUP, DIM, generator=generator)
    calls = {
        "full": lambda: full_attention(q, layers),
        "shared": lambda: shared_attention(q, layers, args.prompts, args.samples),
    }
    diff = max((a - b).abs().max().item() for a, b in zip(calls["full"](), calls["shared"]()))
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.repeats):  # interleaved, so load swings hit both alike
        for name, call in calls.items():
            times[name].append(median_seconds(call, 1))  # one warm-up call, one timed
    full, shared = (statistics.median(times[name]) for name in ("full", "shared"))
    print(
        f"{args.prompts} prompts x {args.samples} rows, prefix {args.prefix}, suffix {args.suffix}, {LAYERS} layers, "
        f"{args.threads} threads: full {full * 1e3:.1f} ms, shared {shared * 1e3:.1f} ms; max |difference| {diff:.1e}"
    )
    print(f"ratio shared/full attention time: {shared / full:.2f}")


if __name__ == "__main__":
    main()
