"""The graph engine's fixed-shape decode step against the eager engine on this machine, side by side.

Measured in one process, in interleaved rounds (the machine is shared: read the ratios):
  * read bandwidth (``torch.sum`` over 256 MB, best pass) and the memory-bound limit,
    bandwidth / (bytes of the base weights) × batch tokens/s (a step streams every weight once);
  * tokens/s of one mixed-adapter batch (rows spread round robin over the adapters; every row
    writes exactly ``--tokens`` tokens): the eager engine (:func:`evolora.generation.decode.decode`
    with routed hooks), the graph engine's step uncaptured, and that step under ``torch.compile``
    (its compile seconds printed apart, never timed in the rounds) — each as a share of the limit;
  * the same number of steps of the base weights' GEMMs alone (the fused q/k/v, o, gate/up,
    down and LM-head products at the batch's rows): the step's floor on this CPU's GEMM library.

    python benchmarks/graph_decode.py --threads 2 --batch 8 --tokens 48 --adapters 4
    python benchmarks/graph_decode.py --quick          # tiny random model, no compile, seconds (smoke test)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from rollout_limit import read_bandwidth, weight_bytes  # benchmarks/ (scripts run from there)

from evolora.generation.decode import decode
from evolora.generation.graph import GraphDecoder
from evolora.generation.rollout import chat_prompt, left_pad
from evolora.generation.routed import routed
from evolora.generation.static_step import _linear
from evolora.generation.types import Sampling
from evolora.model import load_base
from evolora.population import AdapterBank

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--adapters", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile row")
    parser.add_argument("--quick", action="store_true", help="tiny random model, 8 tokens, 1 round")
    args = parser.parse_args()
    if args.quick:
        args.model, args.tokens, args.repeats, args.no_compile = "tiny-random", 8, 1, True
    torch.set_num_threads(args.threads)
    model, tokenizer = load_base(args.model, dtype="float32")
    slots = [f"A{i}" for i in range(args.adapters)]
    bank = AdapterBank(model, slots, rank=8, alpha=16, target_modules=MODULES)
    generator = torch.Generator().manual_seed(0)
    for slot in slots:
        bank.init_factors(slot, generator, b_std=1e-3)
    prompt = chat_prompt(tokenizer, [{"role": "user", "content": "Write a short story about a robot who counts."}])
    ids, attention = left_pad([prompt] * args.batch, tokenizer.pad_token_id)
    names = [slots[i % len(slots)] for i in range(args.batch)]
    greedy = Sampling(max_new_tokens=args.tokens, greedy=True)
    common = dict(eos_ids={tokenizer.eos_token_id}, pad_id=tokenizer.pad_token_id, min_new_tokens=args.tokens)

    def eager():
        with torch.no_grad():
            return decode(bank.model, ids, attention, names, greedy, context=lambda rows: routed(bank, rows), **common)

    def graph_of(engine):
        return lambda: engine.decode(ids, attention, names, greedy, generator=None, **common)

    engine = GraphDecoder(bank)
    calls = {"eager engine": eager, "graph step, uncaptured": graph_of(engine)}
    x = {
        g.weight.shape[1]: torch.randn(args.batch, g.weight.shape[1])
        for _, _, groups in engine.weights.layers
        for g in groups
    }

    def matmuls():  # the base GEMMs of one decode step per token, nothing else: what bounds the step
        for _ in range(args.tokens):
            for _, _, groups in engine.weights.layers:
                for g in groups:
                    _linear(x[g.weight.shape[1]], g.weight, g.bias)
            _linear(x[engine.weights.head.shape[1]], engine.weights.head, None)

    calls["base GEMMs alone (no LoRA)"] = matmuls
    reference = eager()
    assert torch.equal(calls["graph step, uncaptured"](), reference), "graph and eager tokens differ"
    if not args.no_compile:
        compiled = graph_of(GraphDecoder(bank, compile=True))
        began = time.perf_counter()
        same = torch.equal(compiled(), reference)
        print(
            f"torch.compile of the step (every window and bucket of one call): {time.perf_counter() - began:.1f} s; "
            f"tokens equal to eager: {same}"
        )
        calls["graph step, torch.compile"] = compiled
    bandwidth = [read_bandwidth()]
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.repeats):
        for name, call in calls.items():
            began = time.perf_counter()
            call()
            seconds[name].append(time.perf_counter() - began)
        bandwidth.append(read_bandwidth(passes=2))
    weights = weight_bytes(model)
    limit = max(bandwidth) * 1e9 / weights * args.batch
    tokens = args.batch * args.tokens
    print(
        f"\n{args.model} fp32, batch {args.batch} over {args.adapters} adapters, {args.tokens} new tokens, "
        f"{args.threads} threads, prompt {ids.shape[1]} tokens, median of {args.repeats} interleaved rounds"
    )
    print(f"read bandwidth {max(bandwidth):.1f} GB/s, base weights {weights / 1e9:.3f} GB, limit {limit:.1f} tok/s")
    print(f"{'path':<30}{'seconds':>9}{'tok/s':>9}{'of limit':>10}{'vs eager':>10}")
    base = seconds["eager engine"]
    for name, times in seconds.items():
        rate = tokens / statistics.median(times)
        ratio = statistics.median(b / t for b, t in zip(base, times))
        print(f"{name:<30}{statistics.median(times):>9.2f}{rate:>9.1f}{rate / limit:>10.2f}{ratio:>10.2f}")
    best = min((n for n in seconds if "GEMMs" not in n), key=lambda n: statistics.median(seconds[n]))
    print(
        f"ratio graph/eager tok/s: {statistics.median(b / t for b, t in zip(base, seconds['graph step, uncaptured'])):.2f}x; "
        f"best {best!r} at {tokens / statistics.median(seconds[best]) / limit:.2f} of the limit"
    )


if __name__ == "__main__":
    main()
