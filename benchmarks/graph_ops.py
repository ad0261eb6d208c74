"""Operations per decode step of the graph engine: the fused step against the layer-by-layer one, side by side.

A captured step replays one kernel per dispatched operation, and at small batches a GPU step is
bound by their number, not by the bytes of the weights. This script counts, for one decode step of
a random-weight model of SmolLM2-135M's shapes (no download; 8 adapters over every linear layer,
rows round robin over them), the ATen operations dispatched (``TorchDispatchMode``): all, and
those that launch work (views, slices and other aliasing operations left out), per step and per
decoder layer ((count at L layers − count at 2 layers) / (L − 2)), for

* ``before``: :func:`reference_step`, the step as HF's modules compute it (RMSNorm as 6-8
  element-wise operations, rotary on q and k apart with ``rotate_half``, scores × scaling,
  ``masked_fill``, fp32 softmax, a cache write each for k and v);
* ``after``: :func:`evolora.generation.static_step.decode_step`;

in fp32 and bf16, then times both uncaptured on this device (tok/s of the step alone, interleaved
rounds, median) and prints their logits' largest difference. On CUDA it also counts the kernels
the profiler sees per step (``F.rms_norm`` is one fused kernel there; on the CPU it decomposes).

    python benchmarks/graph_ops.py --threads 1 --batch 16 --steps 8
    python benchmarks/graph_ops.py --quick --model tiny-random     # seconds (smoke test)
    python benchmarks/graph_ops.py --device cuda --dtype bfloat16 --batch 64
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from gpu_speed import MODULES, SMOLLM2_135M  # benchmarks/: this script's folder
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from evolora.generation.static_cache import StaticBuffers, sample
from evolora.generation.static_step import SIBLINGS, StaticWeights, _Group, _linear, _project, decode_step
from evolora.population import AdapterBank

SHAPES = {
    "smollm2-135m": SMOLLM2_135M,
    "tiny-random": dict(
        SMOLLM2_135M,
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
}
"""Model shapes by ``--model`` name (random weights, no download)."""

ALIASES = {
    "view",
    "_unsafe_view",
    "reshape",
    "t",
    "transpose",
    "permute",
    "expand",
    "slice",
    "select",
    "split",
    "split_with_sizes",
    "unsqueeze",
    "squeeze",
    "alias",
    "detach",
    "as_strided",
    "unbind",
    "flatten",
    "_reshape_alias",
    "lift_fresh",
    "unflatten",
}
"""ATen operations that only make a new view of a tensor (no kernel)."""


def reference_step(w: StaticWeights, tokens, position, column, kv, valid, onehot, window: int) -> torch.Tensor:
    """The decode step with HF's own modules for the norms, ``apply_rotary_pos_emb``, scores × scaling,
    ``masked_fill``, fp32 softmax, and one cache write each for k and v (the step before the fusions)."""
    keys, values = kv[:, 0], kv[:, 1]
    rows = tokens.shape[0]
    valid.index_fill_(1, column, True)
    mask = valid[:, None, None, :window]
    hidden = w.embed(tokens)
    cos, sin = w.rotary(hidden, position[:, None])
    d, hq, hk = w.head_dim, w.heads, w.kv_heads
    for i, (layer, attn, (qkv, out, gate_up, down)) in enumerate(w.layers):
        x = layer.input_layernorm(hidden)
        q, k, v = _project(x, qkv, onehot).split(qkv.sizes, dim=-1)
        q, k, v = q.view(rows, hq, 1, d), k.view(rows, hk, 1, d), v.view(rows, hk, 1, d)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        keys[i].index_copy_(2, column, k)
        values[i].index_copy_(2, column, v)
        kc, vc = keys[i][:, :, :window], values[i][:, :, :window]
        scores = torch.matmul(q.view(rows, hk, hq // hk, d), kc.transpose(-1, -2)) * w.scaling
        probs = scores.masked_fill(~mask, -float("inf")).float().softmax(dim=-1).to(vc.dtype)
        context = torch.matmul(probs, vc).reshape(rows, hq * d)
        hidden = hidden + _project(context, out, onehot)
        x = layer.post_attention_layernorm(hidden)
        g, u = _project(x, gate_up, onehot).split(gate_up.sizes, dim=-1)
        hidden = hidden + _project(layer.mlp.act_fn(g) * u, down, onehot)
    return _linear(w.norm(hidden), w.head, None)


def natural(w: StaticWeights) -> StaticWeights:
    """``w`` with each layer's q/k/v group in the siblings' own column order (what :func:`reference_step` reads)."""
    parent, leaves = SIBLINGS[0]
    plain = copy.copy(w)
    plain.layers = []
    for i, (layer, attn, groups) in enumerate(w.layers):
        names = [f"model.layers.{i}.{parent}.{leaf}" for leaf in leaves]
        group = _Group([getattr(attn, leaf) for leaf in leaves], names, w.bank, w.slots, w.kernels)
        group.refresh(w.bank, list(range(w.slots)))
        plain.layers.append((layer, attn, [group, *groups[1:]]))
    return plain


class Counter(TorchDispatchMode):
    """Counts dispatched ATen operations by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops[name] = self.ops.get(name, 0) + 1
        return func(*args, **(kwargs or {}))

    def launched(self) -> int:
        return sum(n for name, n in self.ops.items() if name not in ALIASES)


def build(
    layers: int,
    dtype: torch.dtype,
    device: str,
    adapters: int,
    rank: int,
    shapes: dict = SMOLLM2_135M,
    swapped_copy: bool | None = None,
) -> StaticWeights:
    """A random-weight model of ``shapes`` with ``layers`` layers and a bank of ``adapters`` slots
    (``swapped_copy``: :class:`StaticWeights`' q/k/v layout; None: the device's)."""
    torch.manual_seed(0)
    config = LlamaConfig(**dict(shapes, num_hidden_layers=layers))
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    slots = [f"A{i}" for i in range(adapters)]
    bank = AdapterBank(model, slots, rank=rank, alpha=2 * rank, target_modules=MODULES)
    generator = torch.Generator().manual_seed(0)
    for slot in slots:
        bank.init_factors(slot, generator, b_std=1e-2)
    w = StaticWeights(bank, swapped_copy=swapped_copy)
    w.natural = natural(w)
    return w


def buffers(w: StaticWeights, rows: int, prompt: int, capacity: int) -> StaticBuffers:
    """Buffers of ``rows`` rows whose first ``prompt`` cache columns hold random K/V, rows round robin over the adapters."""
    b = StaticBuffers(w, rows, capacity)
    generator = torch.Generator().manual_seed(1)
    b.kv[..., :prompt, :] = torch.randn(b.kv[..., :prompt, :].shape, generator=generator).to(b.kv)
    b.valid[:, :prompt] = True
    b.position.fill_(prompt)
    b.column.fill_(prompt)
    b.last.copy_(torch.randint(0, w.vocab, (rows,), generator=generator))
    b.done.fill_(False)
    b.onehot[torch.arange(rows), torch.arange(rows) % w.slots] = 1.0
    return b


def one_step(fn, w: StaticWeights, b: StaticBuffers, rows: int, window: int) -> torch.Tensor:
    """The engine's greedy step (``static_cache.step``) with ``fn`` as its decode step; returns its logits."""
    if fn is reference_step:
        w = w.natural if hasattr(w, "natural") else w
    logits = fn(
        w, b.last[:rows], b.position[:rows], b.column, b.kv[:, :, :rows], b.valid[:rows], b.onehot[:rows], window
    )
    token = sample(b, logits, rows, greedy=True, top_p=False, total=0, generator=None)
    token = torch.where(b.done[:rows], b.pad, token)
    b.out.index_put_((b.rows[:rows], b.step.expand(rows)), token)
    b.done[:rows] |= b.eos[token]
    b.last[:rows] = token
    b.position[:rows] += 1
    b.column += 1
    b.step += 1
    return logits


STEPS = {"before": reference_step, "after": decode_step}


def count(
    dtype: torch.dtype, device: str, rows: int, adapters: int, rank: int, layers: int, shapes: dict = SMOLLM2_135M
) -> dict:
    """{path: (all ops per step, launched per step, launched per layer, op histogram)} at ``layers`` layers,
    the q/k/v GEMM in CUDA's layout (with the halves-swapped copy)."""
    result = {}
    models = {n: build(n, dtype, device, adapters, rank, shapes, swapped_copy=True) for n in (2, layers)}
    for path, fn in STEPS.items():
        launched = {}
        for n, w in models.items():
            b = buffers(w, rows, 64, 128)
            one_step(fn, w, b, rows, 128)  # warm-up (lazy initialisations)
            with torch.no_grad(), Counter() as counter:
                one_step(fn, w, b, rows, 128)
            launched[n] = counter.launched()
            if n == layers:
                total, histogram = sum(counter.ops.values()), counter.ops
        result[path] = (total, launched[layers], (launched[layers] - launched[2]) / (layers - 2), histogram)
    return result


def cuda_kernels(w: StaticWeights, rows: int) -> dict[str, int]:
    """Kernels (and memcpy/memset) the profiler records on the GPU for one step of each path."""
    from torch.profiler import ProfilerActivity, profile

    kernels = {}
    for path, fn in STEPS.items():
        b = buffers(w, rows, 64, 128)
        one_step(fn, w, b, rows, 128)
        torch.cuda.synchronize()
        with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
            one_step(fn, w, b, rows, 128)
            torch.cuda.synchronize()
        kernels[path] = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    return kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", choices=sorted(SHAPES), help="shapes of the random model")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="dtype of the timed rounds")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--steps", type=int, default=8, help="decode steps per timed round")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="4 layers, batch 4, 2 steps, 1 round (smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.layers, args.batch, args.steps, args.repeats = 4, 4, 2, 1
    if args.layers < 3 or args.batch < 1:
        parser.error("--layers must be >= 3 and --batch >= 1")
    torch.set_num_threads(args.threads)
    shapes = SHAPES[args.model]
    print(
        f"{args.model} shapes ({args.layers} layers), {args.adapters} adapters rank {args.rank} on every linear layer, "
        f"batch {args.batch}, window 128, device {args.device}"
    )
    print("operations per step, the q/k/v layout as on CUDA (the halves-swapped copy from the GEMM):")
    print(f"{'dtype':<10}{'path':<8}{'ops/step':>10}{'launching/step':>16}{'launching/layer':>17}")
    per_layer = {}
    for name in ("float32", "bfloat16"):
        for path, (total, launched, per_layer[name, path], _) in count(
            getattr(torch, name), args.device, args.batch, args.adapters, args.rank, args.layers, shapes
        ).items():
            print(f"{name:<10}{path:<8}{total:>10}{launched:>16}{per_layer[name, path]:>17.1f}")

    dtype = getattr(torch, args.dtype)
    w = build(args.layers, dtype, args.device, args.adapters, args.rank, shapes)
    if args.device.startswith("cuda"):
        kernels = cuda_kernels(w, args.batch)
        print(f"CUDA kernels per step ({args.dtype}): before {kernels['before']}, after {kernels['after']}")
    states = {path: buffers(w, args.batch, 64, 128) for path in STEPS}
    with torch.no_grad():
        logits = {path: one_step(fn, w, states[path], args.batch, 128).float() for path, fn in STEPS.items()}
    print(
        f"largest |logit difference| after vs before ({args.dtype}): "
        f"{(logits['after'] - logits['before']).abs().max().item():.3g}"
    )
    seconds: dict[str, list[float]] = {path: [] for path in STEPS}
    for _ in range(args.repeats):
        for path, fn in STEPS.items():
            b = buffers(w, args.batch, 64, 128)
            sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
            sync()
            began = time.perf_counter()
            with torch.no_grad():
                for _ in range(args.steps):
                    one_step(fn, w, b, args.batch, 128)
            sync()
            seconds[path].append(time.perf_counter() - began)
    rate = {path: args.batch * args.steps / statistics.median(times) for path, times in seconds.items()}
    ratio = statistics.median(b / a for b, a in zip(seconds["before"], seconds["after"]))
    print(
        f"uncaptured step (q/k/v layout {'with' if w.flipped else 'without'} the swapped copy), {args.dtype}, "
        f"{args.threads} thread(s), median of {args.repeats} interleaved rounds of "
        f"{args.steps} steps: before {rate['before']:.1f} tok/s, after {rate['after']:.1f} tok/s, "
        f"after/before {ratio:.2f}x"
    )
    print(
        "ratio after/before launching operations per layer: "
        + ", ".join(
            f"{name} {per_layer[name, 'after'] / per_layer[name, 'before']:.2f}" for name in ("float32", "bfloat16")
        )
    )


if __name__ == "__main__":
    main()
