"""The eager decode's stop check: every live row's tail decoded at every step, against only the rows
whose new token the stop mask flags (:class:`evolora.generation.kernels.stop_mask.FlaggedStop`).

One greedy routed decode of ``--batch`` chat prompts (two adapters and base rows) on the embedded
SmolLM2-135M (or ``--model tiny-random``), with the stop strings ``--stop`` (gsm's problem segment's by
default), run both ways, interleaved ``--repeats`` times in this one process; asserts equal tokens and
prints the median seconds of each, their ratio, the rows decoded by each check, and the one-off
seconds of building the mask, and the time spent inside the check's batch decodes. Record ``lscpu`` and ``uptime`` with the figures.

    python benchmarks/stop_check.py                        # SmolLM2-135M, batch 16, 1 thread
    python benchmarks/stop_check.py --stop '\\n' --batch 16
    python benchmarks/stop_check.py --model tiny-random --repeats 1   # seconds (smoke)
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
from _timing import update_bank  # noqa: E402

TOPICS = ("the sea", "a train", "bread", "winter", "a cat", "numbers", "rain", "the moon")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per row at most")
    parser.add_argument("--stop", action="append", help="a stop string (repeatable; default: ``` and a blank line)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    stops = tuple(s.encode().decode("unicode_escape") for s in args.stop) if args.stop else ("```", "\n\n")
    if args.batch < 1 or args.tokens < 1 or args.repeats < 1 or any(not s for s in stops):
        parser.error("--batch, --tokens and --repeats must be >= 1 and stop strings non-empty")
    from evolora.generation.decode import decode
    from evolora.generation.engine import vocab_rows
    from evolora.generation.kernels.stop_mask import FlaggedStop, stop_mask
    from evolora.generation.rollout import chat_prompt, left_pad
    from evolora.generation.routed import BASE, routed
    from evolora.generation.stops import StopOnText
    from evolora.generation.types import Sampling
    from evolora.model import load_base

    model, tokenizer = load_base(args.model, num_threads=args.threads)
    bank = update_bank(model, ["A0", "A1"])
    asks = [
        f"Write four short lines about {TOPICS[i % len(TOPICS)]}, one blank line between them."
        for i in range(args.batch)
    ]
    ids, attention = left_pad(
        [chat_prompt(tokenizer, [{"role": "user", "content": a}]) for a in asks], tokenizer.pad_token_id
    )
    names = [("A0", "A1", BASE)[i % 3] for i in range(args.batch)]
    began = time.perf_counter()
    mask = stop_mask(tokenizer, stops, size=vocab_rows(model))
    build = time.perf_counter() - began
    tails = StopOnText(tokenizer, stops, 0).tails
    decoded = {"every row": 0, "flagged rows": 0}
    inside = {"every row": 0.0, "flagged rows": 0.0}  # seconds spent in the check's batch decodes

    def counted(label):
        def check(generated, rows, t):
            began = time.perf_counter()
            decoded[label] += len(rows)
            hit = tails(generated)
            inside[label] += time.perf_counter() - began
            return hit

        return check

    checks = {"every row": counted("every row"), "flagged rows": FlaggedStop(counted("flagged rows"), mask)}
    times, outs = {k: [] for k in checks}, {}
    with torch.no_grad():
        for _ in range(args.repeats):
            for label, stopped in checks.items():
                began = time.perf_counter()
                outs[label] = decode(
                    bank.model,
                    ids,
                    attention,
                    names,
                    Sampling(max_new_tokens=args.tokens, greedy=True),
                    eos_ids={tokenizer.eos_token_id},
                    pad_id=tokenizer.pad_token_id,
                    context=lambda rows: routed(bank, rows),
                    stopped=stopped,
                )
                times[label].append(time.perf_counter() - began)
    assert torch.equal(outs["every row"], outs["flagged rows"]), "the flagged check changed the tokens"
    ended = int((outs["every row"] == tokenizer.pad_token_id).any(dim=1).sum())
    every, flagged = (statistics.median(times[k]) for k in checks)
    print(
        f"{args.model}, batch {args.batch}, {outs['every row'].shape[1]} steps, stops {stops!r}, "
        f"{ended} rows ended early, {args.threads} thread(s), {args.repeats} interleaved repeats"
    )
    for label in checks:
        print(
            f"  {label:<13} {statistics.median(times[label]):.3f} s   rows decoded {decoded[label] // args.repeats}"
            f"   in the check {inside[label] / args.repeats * 1e3:.1f} ms per decode"
        )
    print(f"  every row / flagged rows: {every / flagged:.3f}; the mask's one-off build: {build:.2f} s; equal tokens")


if __name__ == "__main__":
    main()
