"""Checks, with assertions, the decode step's Triton kernels and the stop mask on a CUDA GPU; prints their speed.

    python benchmarks/gpu_kernels.py                        # a CUDA GPU with triton (CUDA builds of torch bring it)
    python benchmarks/gpu_kernels.py --device cpu --quick   # the same checks in fp32 under TRITON_INTERPRET=1 (smoke)

For each sibling group of SmolLM2-135M's and Qwen2.5-0.5B's decoder layer (q/k/v with grouped-query
widths, o, gate/up, down), 8 adapters of rank 8, rows round robin over the adapters with every
fifth row bare (slot −1), at batches of 64 and 256 rows:

1. parity of :func:`~evolora.generation.kernels.lora_triton.routed_lora_triton` (shrink + expand)
   against the torch path, the static step's masked GEMMs (:func:`torch_path`, factors prepared
   once): in fp32 with TF32 off, max |Δ| ≤ :data:`FP32_TOLERANCE`; with a bf16 input and output
   (fp32 factors), at most one bf16 rounding step apart everywhere and unequal in under
   :data:`BF16_UNEQUAL` of the outputs (the sums differ in order only); bare rows bitwise untouched;
   the static step's q/k/v column order (halves-swapped copy, repeated columns) equal as well;
2. speed (bf16): each path captured once in a CUDA graph and replayed back to back, CUDA events,
   µs per group call, and GPU kernels per call (``torch.profiler`` of one uncaptured call); asserted: the
   Triton path launches 2 kernels and is not slower than the torch path (summed over the groups);
3. the fused rotary + k/v cache write (:mod:`~evolora.generation.kernels.rotary_triton`) against its
   torch reference: fp32 max |Δ| ≤ 1e-6; in bf16 within one rounding step of the fp32 result of
   the same inputs (the torch path rounds after each operation; printed); one kernel, not slower;
4. the stop mask (``"\\n"``): built on the device, its flags of 256 rows' new tokens equal the CPU's,
   the device gather timed (≤ :data:`FLAGS_MS` ms per step); on recorded random tokens the host
   check of only flagged rows ends the rows the every-row check ends (timed side by side);
5. the kernels as the static step wires them: :func:`~evolora.generation.kernels.kernel_backend`
   picks ``"triton"`` on this GPU (its feature test passed), and per group a
   :class:`~evolora.generation.lora_stack.DenseStack` built with ``backend="triton"`` adds, from the
   same :meth:`~evolora.generation.lora_stack.DenseStack.write_` calls, the delta of one built with
   ``"torch"`` (fp32, max |Δ| ≤ :data:`FP32_TOLERANCE`, q/k/v in the static step's column order),
   in 2 kernels per call given the rows' slots;
6. the fused SiLU·mul (:mod:`~evolora.generation.kernels.silu_mul_triton`) of the gate/up output
   (I = 1536, 4864) against its torch reference: fp32 max |Δ| ≤ 1e-5; in bf16 within one rounding step
   of the fp32 result of the same inputs; one kernel, not slower than the torch path's two
   (:mod:`fused_checks`);
7. the flash-decode attention (:mod:`~evolora.generation.kernels.attention_triton`; 3 and 7 query
   heads per key/value head, head size 64) over a 256-column window of a 512-column cache, rows
   left-padded by 0-63 columns and filled to a shared column, one row to another length, against the
   torch path (the whole window, masked): fp32 max |Δ| ≤ 1e-5; bf16 within one rounding step of the
   fp32 result; one kernel per layer, not slower than the torch path's three.

Prints torch, triton and driver versions. Without CUDA (and without ``--device cpu``) it says so
and exits 0 having checked nothing. Exit 1 when a check fails, after every figure is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

FP32_TOLERANCE = 1e-5
BF16_UNEQUAL = 0.02
FLAGS_MS = 0.1
RANK, SLOTS = 8, 8
GROUPS = {  # model: [(group, d_in, output widths)]
    "smollm2-135m": [
        ("qkv", 576, (576, 192, 192)),
        ("o", 576, (576,)),
        ("gate_up", 576, (1536, 1536)),
        ("down", 1536, (576,)),
    ],
    "qwen2.5-0.5b": [
        ("qkv", 896, (896, 128, 128)),
        ("o", 896, (896,)),
        ("gate_up", 896, (4864, 4864)),
        ("down", 4864, (896,)),
    ],
}
QUICK = {"tiny": [("qkv", 64, (64, 32, 32)), ("gate_up", 64, (96, 96)), ("down", 96, (64,))]}


def case(d_in: int, widths: tuple, rows: int, device, seed: int = 0):
    """Stacked factors (fp32, realistic scales), slots (every fifth row −1), x and a base output, fp32."""
    from evolora.generation.kernels.lora_torch import stack_lora

    g = torch.Generator().manual_seed(seed)
    a_f = [[torch.randn(RANK, d_in, generator=g) / d_in**0.5 for _ in widths] for _ in range(SLOTS)]
    b_f = [[torch.randn(w, RANK, generator=g) * 0.02 for w in widths] for _ in range(SLOTS)]
    a, b = stack_lora(a_f, b_f, 2.0)
    slots = torch.arange(rows) % SLOTS
    slots[::5] = -1
    x, base = torch.randn(rows, d_in, generator=g), torch.randn(rows, sum(widths), generator=g)
    return [t.to(device) for t in (a, b, slots, x, base)]


def torch_path(a: torch.Tensor, b: torch.Tensor, widths, slots: torch.Tensor):
    """The static step's LoRA op sequence with its tensors prepared once: returns ``run(x, out)``
    (a dtype copy of x, the shrink over every slot, the one-hot product, the expand, the add)."""
    from evolora.generation.kernels.lora_torch import static_layout

    a_flat = a.reshape(-1, a.shape[-1]).t().contiguous()  # (d_in, P·G·r)
    block = static_layout(b, widths, len(widths))  # (P·G·r, D)
    onehot = (slots[:, None] == torch.arange(SLOTS, device=slots.device)).float()

    def run(x, out):
        h = torch.mm(x.to(a_flat.dtype), a_flat)
        h.view(x.shape[0], SLOTS, -1).mul_(onehot[:, :, None])
        return out.addmm_(h, block) if out.dtype == h.dtype else out.add_(torch.mm(h, block))

    return run


def parity(kernels, groups, rows: int, device, bf16: bool, failures: list) -> None:
    """Part 1 for one batch; appends what failed to ``failures``."""
    from evolora.generation.kernels.lora_torch import column_projections
    from evolora.generation.static_step import qkv_order

    for name, d_in, widths in groups:
        a, b, slots, x, base = case(d_in, widths, rows, device)
        want = torch_path(a, b, widths, slots)(x, base.clone())
        got = kernels.routed_lora_triton(x, a, b, slots, widths, base.clone())
        error = (got - want).abs().max().item()
        line = f"  {name} rows {rows} fp32: max |Δ| {error:.2e}"
        if error > FP32_TOLERANCE or not torch.equal(got[slots < 0], base[slots < 0]):
            failures.append(f"{name} fp32 parity {error:.2e}")
        if name == "qkv":
            head = 64 if widths[1] >= 64 else 16  # the models' head size; 16 for the tiny group
            order = qkv_order(widths[0] // head, widths[1] // head, head, flipped=True).to(device)
            projection = column_projections(widths, device)[order]
            moved = kernels.routed_lora_triton(
                x, a, b[:, :, order].contiguous(), slots, projection, base[:, order].contiguous()
            )
            ordered = (moved - want[:, order]).abs().max().item()
            line += f"; static q/k/v column order {ordered:.2e}"
            if ordered > FP32_TOLERANCE:
                failures.append(f"qkv column order {ordered:.2e}")
        if bf16:
            x16, base16 = x.bfloat16(), base.bfloat16()
            want16 = torch_path(a, b, widths, slots)(x16, base16.clone()).float()
            got16 = kernels.routed_lora_triton(x16, a, b, slots, widths, base16.clone()).float()
            step = torch.finfo(torch.bfloat16).eps * want16.abs() + 1e-6
            unequal = (got16 != want16).float().mean().item()
            line += f"; bf16 unequal {unequal:.2%}, max |Δ| {(got16 - want16).abs().max().item():.2e}"
            if not ((got16 - want16).abs() <= step).all() or unequal > BF16_UNEQUAL:
                failures.append(f"{name} bf16 parity (unequal {unequal:.2%})")
        print(line, flush=True)


def speed(kernels, groups, rows: int, device, replays: int, failures: list) -> None:
    """Part 2 for one batch (CUDA only)."""
    from bench_cuda import count_kernels, replay_us

    total = {"torch": 0.0, "triton": 0.0}
    for name, d_in, widths in groups:
        a, b, slots, x, base = case(d_in, widths, rows, device)
        x, out = x.bfloat16(), base.bfloat16()
        hidden = torch.empty(rows, a.shape[1], device=device)
        paths = {
            "torch": lambda run=torch_path(a, b, widths, slots): run(x, out),
            "triton": lambda: kernels.routed_lora_triton(x, a, b, slots, widths, out, hidden=hidden),
        }
        figures = {}
        for path, call in paths.items():
            us, _ = replay_us(call, replays)
            figures[path] = (us, count_kernels(call))
            total[path] += us
        print(
            f"  {name} rows {rows} bf16: torch {figures['torch'][0]:.1f} µs ({figures['torch'][1]} kernels), "
            f"triton {figures['triton'][0]:.1f} µs ({figures['triton'][1]} kernels)",
            flush=True,
        )
        if figures["triton"][1] != 2:
            failures.append(f"{name}: the Triton path launched {figures['triton'][1]} kernels, not 2")
    print(
        f"  every group, rows {rows}: torch {total['torch']:.1f} µs, triton {total['triton']:.1f} µs "
        f"(triton/torch {total['triton'] / total['torch']:.2f})",
        flush=True,
    )
    if total["triton"] > total["torch"]:
        failures.append(f"rows {rows}: Triton {total['triton']:.1f} µs > torch {total['torch']:.1f} µs")


ROTARY = {"smollm2-135m": (3, 3, 64), "qwen2.5-0.5b": (2, 7, 64), "tiny": (2, 2, 16)}
"""Per model: key/value heads, query heads per key/value head, head size."""


def rotary(module, model: str, rows: int, device, replays: int, failures: list) -> None:
    """Part 4: the fused rotary + k/v write against its torch reference (fp32, bf16), timed on CUDA."""
    from evolora.generation.kernels.rotary_torch import rotary_kv_write_torch

    heads, group, dim = ROTARY[model]
    g = torch.Generator().manual_seed(0)
    y = torch.randn(rows, heads, group + 2, dim, generator=g).to(device)
    angles = torch.rand(rows, dim // 2, generator=g).repeat(1, 2).mul(100).to(device)
    cos, sin, column = angles.cos(), angles.sin(), torch.tensor([5], device=device)
    kv = torch.zeros(2, rows, heads, 16, dim, device=device)
    want = rotary_kv_write_torch(y, cos, sin, kv.clone(), column, scale=0.125)
    error = (module.rotary_kv_write(y, cos, sin, kv.clone(), column, scale=0.125) - want).abs().max().item()
    line = f"  rotary + k/v write, rows {rows}: fp32 max |Δ| {error:.2e}"
    if error > 1e-6:
        failures.append(f"rotary fp32 parity {error:.2e}")
    if device.type == "cuda":
        from bench_cuda import count_kernels, replay_us

        y16, cos16, sin16, kv16 = y.bfloat16(), cos.bfloat16(), sin.bfloat16(), kv.bfloat16()
        truth = rotary_kv_write_torch(y16.float(), cos16.float(), sin16.float(), kv.clone(), column, scale=0.125)
        fused = module.rotary_kv_write(y16, cos16, sin16, kv16.clone(), column, scale=0.125).float()
        steps = rotary_kv_write_torch(y16, cos16, sin16, kv16.clone(), column, scale=0.125).float()
        # one rounding step of the value, and 1e-6 for an fp32 fma against separate products under cancellation
        within = ((fused - truth).abs() <= torch.finfo(torch.bfloat16).eps * truth.abs() + 1e-6).all().item()
        line += (
            f"; bf16 vs fp32 of the same inputs: fused {(fused - truth).abs().max().item():.2e} "
            f"(one rounding: {within}), torch {(steps - truth).abs().max().item():.2e}"
        )
        if not within:
            failures.append("rotary bf16: more than one rounding step from fp32")
        q16 = torch.empty(rows, heads, group, dim, dtype=torch.bfloat16, device=device)
        calls = {
            "torch": lambda: rotary_kv_write_torch(y16, cos16, sin16, kv16, column, scale=0.125),
            "triton": lambda: module.rotary_kv_write(y16, cos16, sin16, kv16, column, scale=0.125, out=q16),
        }
        figures = {path: (replay_us(call, replays)[0], count_kernels(call)) for path, call in calls.items()}
        line += "; " + ", ".join(f"{path} {us:.1f} µs ({n} kernels)" for path, (us, n) in figures.items())
        if figures["triton"][1] != 1 or figures["triton"][0] > figures["torch"][0]:
            failures.append(f"rotary: Triton {figures['triton']} against torch {figures['torch']}")
    print(line, flush=True)


def stop_check(device, rows: int, failures: list) -> None:
    """Part 3."""
    from gpu_step import host_stop_check, tokenizer_for

    from evolora.generation.kernels.stop_mask import stop_flags, stop_mask

    tokenizer, label = tokenizer_for(49152)
    mask = stop_mask(tokenizer, ("\n",), size=49152, device=device)
    tokens = torch.randint(0, 49152, (rows,), generator=torch.Generator().manual_seed(0))
    same = torch.equal(stop_flags(mask, tokens.to(device)).cpu(), stop_mask(tokenizer, ("\n",), size=49152)[tokens])
    line = f"  stop mask of '\\n' ({label} tokenizer): device flags equal the CPU's: {same}"
    if not same:
        failures.append("device stop flags differ from the CPU's")
    if device.type == "cuda":
        from bench_cuda import replay_us

        moved = tokens.to(device)
        us, _ = replay_us(lambda: stop_flags(mask, moved), 100)
        line += f"; device gather {us / 1e3:.4f} ms per step at {rows} rows"
        if us / 1e3 > FLAGS_MS:
            failures.append(f"stop flags {us / 1e3:.4f} ms > {FLAGS_MS} ms")
    full, flagged, fraction = host_stop_check(tokenizer, "\n", rows, 49152, 3)
    print(
        line + f"; host check per 8 steps: every row {full:.2f} ms, flagged rows {flagged:.2f} ms "
        f"({fraction:.1%} of random tokens flagged), equal ends",
        flush=True,
    )


def wired(groups, rows: int, device, failures: list) -> None:
    """Part 5: the DenseStack the static step builds, Triton backend against torch backend."""
    from evolora.generation.kernels import kernel_backend
    from evolora.generation.kernels.lora_torch import column_projections
    from evolora.generation.lora_stack import DenseStack
    from evolora.generation.static_step import qkv_order

    if device.type == "cuda" and kernel_backend(device) != "triton":
        failures.append(f"kernel_backend picks {kernel_backend(device)!r} on this GPU, not 'triton'")
    for name, d_in, widths in groups:
        a, b, slots, x, base = case(d_in, widths, rows, device)
        columns = column_projections(widths, device)
        order = None
        if name == "qkv":
            head = 64 if widths[1] >= 64 else 16
            order = qkv_order(widths[0] // head, widths[1] // head, head, flipped=False).to(device)
        stacks = {}
        for backend in ("torch", "triton"):
            stack = DenseStack(
                SLOTS,
                len(widths),
                RANK,
                d_in,
                sum(widths),
                dtype=torch.float32,
                device=device,
                columns=columns,
                backend=backend,
            )
            if order is not None:
                stack.reorder(order)
            for p in range(SLOTS):  # b (P, r, D) back to the block-structured s·Bᵀ of write_
                block = torch.zeros(len(widths) * RANK, sum(widths), device=device)
                for j in range(len(widths)):
                    block[j * RANK : (j + 1) * RANK, columns == j] = b[p][:, columns == j]
                stack.write_(p, list(a[p].split(RANK)), block)
            stacks[backend] = stack
        out = base if order is None else base[:, order].contiguous()
        want = stacks["torch"].add_(out.clone(), x, slots)
        got = stacks["triton"].add_(out.clone(), x, slots)
        error = (got - want).abs().max().item()
        line = f"  wired {name} rows {rows}: DenseStack triton vs torch fp32 max |Δ| {error:.2e}"
        if error > FP32_TOLERANCE:
            failures.append(f"wired {name} parity {error:.2e}")
        if device.type == "cuda":
            from bench_cuda import count_kernels

            launched = count_kernels(lambda: stacks["triton"].add_(out, x, slots))
            line += f", {launched} kernels per call (torch path {count_kernels(lambda: stacks['torch'].add_(out, x, slots))})"
            if launched != 2:
                failures.append(f"wired {name}: {launched} kernels per call, not 2")
        print(line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny groups, 8 rows (the CPU smoke test)")
    parser.add_argument("--replays", type=int, default=200, help="back-to-back replays per timing")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA GPU here: checked nothing (use --device cpu for the interpreted smoke test)")
        return 0
    if device.type == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import triton
    from fused_checks import attention_check, silu_mul_check

    from evolora.generation.kernels import attention_triton, rotary_triton, silu_mul_triton
    from evolora.generation.kernels import lora_triton as kernels

    torch.backends.cuda.matmul.allow_tf32 = False
    get_driver = getattr(torch._C, "_cuda_getDriverVersion", None)
    driver = get_driver() if device.type == "cuda" and get_driver is not None else None
    print(
        f"torch {torch.__version__}, triton {triton.__version__}, CUDA driver {driver}, "
        f"device {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu (interpreted)'}"
    )
    failures: list[str] = []
    models = QUICK if args.quick else GROUPS
    for model, groups in models.items():
        print(f"{model}: {SLOTS} adapters of rank {RANK}, every fifth row bare")
        for rows in (8,) if args.quick else (64, 256):
            parity(kernels, groups, rows, device, bf16=device.type == "cuda", failures=failures)
            if device.type == "cuda":
                speed(kernels, groups, rows, device, args.replays, failures)
            rotary(rotary_triton, model, rows, device, args.replays, failures)
            wired(groups, rows, device, failures)
            width = next(widths[0] for name, _, widths in groups if name == "gate_up")
            silu_mul_check(silu_mul_triton, width, rows, device, args.replays, failures)
            attention_check(attention_triton, ROTARY[model], rows, device, args.replays, failures)
    stop_check(device, 8 if args.quick else 256, failures)
    for failure in failures:
        print(f"FAILED: {failure}")
    print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
