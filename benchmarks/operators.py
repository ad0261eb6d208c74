"""Benchmark every registered crossover and mutation on SmolLM2-135M-shaped adapters, and compare
``svd_merge`` with PEFT's ``add_weighted_adapter(combination_type="svd")``.

    python benchmarks/operators.py [--threads 2] [--rank 8] [--repeats 5] [--skip-peft]

Adapters: rank-r LoRA on all 7 linear modules of 30 Llama layers (q/o 576→576, k/v 576→192,
gate/up 576→1536, down 1536→576) = 210 modules, random factors (A ~ N(0, 1/d_in), B ~ N(0, 0.01²)).
Merging: both methods get the same two parents and weights (0.5, 0.5); the error of each is
‖ΔW_method − ΔW*‖_F / ‖ΔW*‖_F summed over modules, where ΔW* is the exact best rank-r
approximation of the weighted sum (dense float64 SVD). PEFT runs on a randomly initialised
LlamaForCausalLM built from a config with SmolLM2-135M's shapes (no download).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from _timing import median_seconds  # benchmarks/_timing.py (scripts run from benchmarks/)

from evolora.operators import REGISTRY, Adapter

LAYERS = 30
SHAPES = {  # module: (d_in, d_out)
    "self_attn.q_proj": (576, 576),
    "self_attn.k_proj": (576, 192),
    "self_attn.v_proj": (576, 192),
    "self_attn.o_proj": (576, 576),
    "mlp.gate_proj": (576, 1536),
    "mlp.up_proj": (576, 1536),
    "mlp.down_proj": (1536, 576),
}


def smollm2_adapter(seed: int, rank: int) -> Adapter:
    g = torch.Generator().manual_seed(seed)
    return {
        f"model.layers.{i}.{m}": (
            torch.randn(rank, d_in, generator=g) / d_in**0.5,
            0.01 * torch.randn(d_out, rank, generator=g),
        )
        for i in range(LAYERS)
        for m, (d_in, d_out) in SHAPES.items()
    }


VARIANTS = {"dare[space=factors]": ("dare", {"space": "factors"})}  # non-default settings worth timing


def operator_table(parents: list[Adapter], repeats: int) -> list[tuple[str, str, float]]:
    rows = []
    crossovers = {name: (name, {}) for name in REGISTRY.names("crossover")} | VARIANTS
    for label, (name, params) in crossovers.items():
        fn = REGISTRY.get("crossover", name).fn
        rows.append(
            (
                "crossover",
                label,
                median_seconds(
                    lambda: fn(parents, [0.2, 0.7], **params, generator=torch.Generator().manual_seed(0)), repeats
                ),
            )
        )
    for name in REGISTRY.names("mutation"):
        fn = REGISTRY.get("mutation", name).fn
        rows.append(
            (
                "mutation",
                name,
                median_seconds(lambda: fn(parents[0], generator=torch.Generator().manual_seed(0)), repeats),
            )
        )
    return rows


def merge_error(merged: dict[str, torch.Tensor], parents: list[Adapter], weights: list[float], rank: int) -> float:
    """Σ_modules ‖ΔW − ΔW*‖_F / Σ_modules ‖ΔW*‖_F with ΔW* the exact dense best rank-r (float64)."""
    num, den = 0.0, 0.0
    for name in parents[0]:
        total = sum(w * (p[name][1].double() @ p[name][0].double()) for w, p in zip(weights, parents))
        u, s, vh = torch.linalg.svd(total, full_matrices=False)
        best = u[:, :rank] * s[:rank] @ vh[:rank]
        num += (merged[name].double() - best).norm().item() ** 2
        den += best.norm().item() ** 2
    return (num / den) ** 0.5


def peft_merge(parents: list[Adapter], weights: list[float], rank: int, repeats: int) -> tuple[float, dict]:
    """Time PEFT's add_weighted_adapter(svd) on a random SmolLM2-shaped Llama; return (s, merged ΔW)."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=LAYERS,
        num_attention_heads=9,
        num_key_value_heads=3,
        vocab_size=256,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)  # benchmark-only: model init uses the global RNG
    model = LlamaForCausalLM(config)
    lora = dict(r=rank, lora_alpha=rank, target_modules=[m.split(".")[-1] for m in SHAPES], lora_dropout=0.0)
    model = get_peft_model(model, LoraConfig(**lora), adapter_name="p0")
    model.add_adapter("p1", LoraConfig(**lora))
    with torch.no_grad():
        for module_name, module in model.named_modules():
            if hasattr(module, "lora_A") and "p0" in getattr(module, "lora_A", {}):
                key = module_name.removeprefix("base_model.model.")
                for adapter_name, parent in zip(("p0", "p1"), parents):
                    a, b = parent[key]
                    module.lora_A[adapter_name].weight.copy_(a)
                    module.lora_B[adapter_name].weight.copy_(b)
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        model.add_weighted_adapter(["p0", "p1"], weights, f"merged{i}", combination_type="svd")
        times.append(time.perf_counter() - start)
    merged = {}
    for module_name, module in model.named_modules():
        if hasattr(module, "lora_A") and "merged0" in getattr(module, "lora_A", {}):
            key = module_name.removeprefix("base_model.model.")
            merged[key] = module.get_delta_weight("merged0").detach()
    return statistics.median(times), merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per operator (median reported)")
    parser.add_argument("--skip-peft", action="store_true", help="skip the PEFT comparison")
    parser.add_argument("--skip-operators", action="store_true", help="only run the merge comparison")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    parents = [smollm2_adapter(1, args.rank), smollm2_adapter(2, args.rank)]
    print(
        f"# SmolLM2-135M shapes, rank {args.rank}, {len(parents[0])} modules, {args.threads} CPU threads, "
        f"torch {torch.__version__}"
    )
    if not args.skip_operators:
        print(f"{'kind':<10} {'operator':<20} {'s/child':>9}  target <0.1 s")
        for kind, name, seconds in operator_table(parents, args.repeats):
            print(f"{kind:<10} {name:<20} {seconds:9.4f}  {'ok' if seconds < 0.1 else 'MISS'}")
    if args.skip_peft:
        return
    weights = [0.5, 0.5]
    ours_s = median_seconds(
        lambda: REGISTRY.get("crossover", "svd_merge").fn(parents, [0.0, 0.0], generator=torch.Generator()),
        args.repeats,
    )
    child = REGISTRY.get("crossover", "svd_merge").fn(parents, [0.0, 0.0], generator=torch.Generator())
    ours_err = merge_error({n: b @ a for n, (a, b) in child.items()}, parents, weights, args.rank)
    peft_s, peft_delta = peft_merge(parents, weights, args.rank, max(1, min(args.repeats, 3)))
    peft_err = merge_error(peft_delta, parents, weights, args.rank)
    print("\n# merge of 2 parents, weights (0.5, 0.5), rank", args.rank)
    print(f"{'method':<44} {'seconds':>9} {'rel. error vs exact':>20}")
    print(f"{'evolora svd_merge (factor space)':<44} {ours_s:9.4f} {ours_err:20.2e}")
    print(f"{'peft add_weighted_adapter(svd) (dense SVD)':<44} {peft_s:9.4f} {peft_err:20.2e}")
    print(f"speed-up: {peft_s / ours_s:.0f}x (target >= 100x at equal or lower error)")


if __name__ == "__main__":
    main()
