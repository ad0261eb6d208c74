"""Clone cost of one DEAP individual: ``toolbox.clone`` (shared tensors) vs a naive deep copy of the factors.

    python benchmarks/clone.py [--threads 1] [--rank 8] [--repeats 50]

DEAP deep-copies every offspring each generation (``varAnd``/``varOr`` call ``toolbox.clone``).
An :class:`evolora.integrations.deap.LoRAIndividual` shares its factor tensors with its copies
(evolora operators return new tensors and never write into their inputs), so a clone costs one
dict of 210 entries and a fitness copy. The naive alternatives copy all 2.44 M floats: a
``copy.deepcopy`` of the factor dict and ``operators.clone_adapter`` (``tensor.clone()`` per factor).

Adapters: rank-r LoRA on all 7 linear modules of 30 SmolLM2-135M layers (q/o 576→576, k/v 576→192,
gate/up 576→1536, down 1536→576) = 210 modules, random factors.
"""

from __future__ import annotations

import argparse
import copy

import torch
from _timing import median_seconds  # benchmarks/_timing.py (scripts run from benchmarks/)

from evolora.integrations.adapters import num_floats, random_adapter
from evolora.integrations.deap import LoRAIndividual, make_toolbox
from evolora.operators import clone_adapter

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


def smollm2_shapes() -> dict[str, tuple[int, int]]:
    return {f"model.layers.{i}.{m}": shape for i in range(LAYERS) for m, shape in SHAPES.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    generator = torch.Generator().manual_seed(0)
    factors = random_adapter(smollm2_shapes(), rank=args.rank, generator=generator)
    individual = LoRAIndividual(factors)
    individual.fitness.values = (0.5,)
    toolbox = make_toolbox(evaluate=lambda ind: (0.0,), generator=generator)
    floats = num_floats(factors)
    rows = [
        ("toolbox.clone (LoRAIndividual)", median_seconds(lambda: toolbox.clone(individual), args.repeats)),
        ("copy.deepcopy(factors)", median_seconds(lambda: copy.deepcopy(factors), args.repeats)),
        ("operators.clone_adapter(factors)", median_seconds(lambda: clone_adapter(factors), args.repeats)),
    ]
    print(
        f"SmolLM2-135M shapes, rank {args.rank}: {len(factors)} modules, {floats / 1e6:.2f} M floats "
        f"({floats * 4 / 2**20:.1f} MiB fp32); {args.threads} thread(s), median of {args.repeats}"
    )
    print(f"{'clone per individual':<36}{'time':>12}{'vs toolbox.clone':>20}")
    base = rows[0][1]
    for name, seconds in rows:
        print(f"{name:<36}{seconds * 1e6:>10.1f} µs{seconds / base:>19.0f}x")


if __name__ == "__main__":
    main()
