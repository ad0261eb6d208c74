"""Layer checkpointing on vs off for one policy update, measured side by side in one process.

``evolora.learner.CHECKPOINT_MIN_TOKENS`` turns decoder-layer checkpointing off for
micro-batches below a padded-token count (arith: 8 rows × ~55 tokens). This script times
``policy_update_many`` over the same samples with checkpointing forced on and forced off,
interleaved ``--repeats`` times (lr 0, so the factors never change between repeats), and
prints the median ratio off/on.

    python benchmarks/checkpoint_threshold.py --model smollm2-135m-instruct --threads 1 \
        --prompt-tokens 31 --completion-tokens 24 --samples 24 --repeats 3
"""

from __future__ import annotations

import argparse
import random
import statistics

from _timing import interleaved_updates, update_bank

import evolora.learner as learner
from evolora.model import load_base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompt-tokens", type=int, default=31)
    parser.add_argument("--completion-tokens", type=int, default=24)
    parser.add_argument("--samples", type=int, default=24, help="samples per adapter (2 adapters)")
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model, _ = load_base(args.model, num_threads=args.threads)
    bank = update_bank(model, ["S0", "S1"])
    rng = random.Random(0)
    vocab = model.config.vocab_size

    def sample(slot: str, i: int) -> learner.Sample:
        prompt = tuple(rng.randrange(vocab) for _ in range(args.prompt_tokens))
        completion = tuple(
            rng.randrange(vocab)
            for _ in range(rng.randint(max(1, args.completion_tokens // 3), args.completion_tokens))
        )
        return learner.Sample(prompt, completion, float(i % 2), f"{slot}:{i // 8}")

    data = {slot: [sample(slot, i) for i in range(args.samples)] for slot in bank.slots}
    padded = args.micro_batch * (args.prompt_tokens + args.completion_tokens)

    def checkpointing(on: bool) -> None:
        learner.CHECKPOINT_MIN_TOKENS = 0 if on else 10**12

    times, _, _ = interleaved_updates(bank, data, checkpointing, repeats=args.repeats, micro_batch=args.micro_batch)
    for on in (True, False):
        print(f"checkpointing {'on ' if on else 'off'}: " + " ".join(f"{t:.2f}" for t in times[on]) + " s")
    print(f"micro-batch of up to {padded} padded tokens; CHECKPOINT_MIN_TOKENS default {learner.CHECKPOINT_MIN_TOKENS}")
    ratio = statistics.median(times[False]) / statistics.median(times[True])
    print(f"ratio checkpointing off/on update time: {ratio:.3f}x")


if __name__ == "__main__":
    main()
