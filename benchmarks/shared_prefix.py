"""Shared-prefix policy update vs one padded forward, measured side by side in one process.

``evolora.generation.completion.SHARE_PREFIXES`` prefills each distinct (adapter, prompt) of a micro-batch
once and runs its completions on the cache. This script builds an arith-shaped update: per
student adapter, ``--groups`` GRPO groups of ``--group-size`` samples of one prompt
(``--prompt-tokens``), plus per teacher adapter ``--teacher-samples`` samples with distinct,
longer prompts; it times ``policy_update_many`` with sharing on and off, interleaved
``--repeats`` times (lr 0, so the factors never change), checks the gradient norms agree, and
prints the median ratios on/off of wall time and of this process's CPU time (less sensitive
to other processes on a shared machine).

    python benchmarks/shared_prefix.py --model smollm2-135m-instruct --threads 1 --repeats 3
"""

from __future__ import annotations

import argparse
import random
import statistics

from _timing import interleaved_updates, update_bank

import evolora.generation.completion as scoring
import evolora.learner as learner
from evolora.model import load_base


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prompt-tokens", type=int, default=47, help="student prompt (arith: 47)")
    parser.add_argument("--teacher-prompt-tokens", type=int, default=83, help="teacher prompt (arith: 83)")
    parser.add_argument("--completion-tokens", type=int, default=24)
    parser.add_argument("--groups", type=int, default=2, help="learnable groups per student (arith: 2-3)")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--teacher-samples", type=int, default=4)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    return parser.parse_args()


def _data(args, vocab: int) -> dict[str, list[learner.Sample]]:
    rng = random.Random(0)

    def tokens(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(vocab) for _ in range(n))

    def completion() -> tuple[int, ...]:
        return tokens(rng.randint(max(1, args.completion_tokens // 3), args.completion_tokens))

    data = {}
    for slot in ("S0", "S1"):
        data[slot] = [
            learner.Sample(prompt, completion(), float(i % 2), f"{slot}:{g}")
            for g in range(args.groups)
            for prompt in [tokens(args.prompt_tokens)]
            for i in range(args.group_size)
        ]
    for slot in ("T0", "T1"):
        data[slot] = [
            learner.Sample(tokens(args.teacher_prompt_tokens), completion(), float(i % 2), slot)
            for i in range(args.teacher_samples)
        ]
    return data


def main() -> None:
    args = _arguments()
    model, _ = load_base(args.model, num_threads=args.threads)
    bank = update_bank(model, ["T0", "T1", "S0", "S1"])
    data = _data(args, model.config.vocab_size)
    times, cpu, norms = interleaved_updates(
        bank,
        data,
        lambda on: setattr(scoring, "SHARE_PREFIXES", on),
        repeats=args.repeats,
        micro_batch=args.micro_batch,
    )
    rows = sum(len(samples) for samples in data.values())
    for share in (True, False):
        print(
            f"shared prefixes {'on ' if share else 'off'}: wall "
            + " ".join(f"{t:.2f}" for t in times[share])
            + " s, process CPU "
            + " ".join(f"{t:.2f}" for t in cpu[share])
            + " s"
        )
    gap = max(abs(norms[True][s] / norms[False][s] - 1) for s in norms[True] if norms[False][s] > 0)
    print(f"{rows} rows, micro-batch {args.micro_batch}; largest relative gradient-norm difference on/off {gap:.1e}")
    print(f"ratio shared/padded update CPU time: {statistics.median(cpu[True]) / statistics.median(cpu[False]):.3f}x")
    print(f"ratio shared/padded update time: {statistics.median(times[True]) / statistics.median(times[False]):.3f}x")


if __name__ == "__main__":
    main()
