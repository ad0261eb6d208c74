"""Micro-batches packed by decoder tokens vs runs of rows, one gsm-shaped update, side by side.

``evolora.learner.PACK_TOKENS`` orders an update's rows by prompt and closes a micro-batch
before it would reach ``CHECKPOINT_MIN_TOKENS`` decoder tokens (then it is checkpointed: one
more forward). This script builds the update of one default ``tasks/gsm.yaml`` step: 2 teachers
× 4 proposals on their own prompts (real teacher prompts of the task, 2 reference examples each;
completion lengths drawn from step records of a 10-step default run: problem + program + print),
and 2 students × ``--groups`` GRPO groups of 4 samples on one problem prompt each (``--student-tokens``
completion tokens, the cap that most samples reach). It times ``policy_update_many`` with
packing on and off, interleaved ``--repeats`` times (lr 0, so the factors never change), checks
the gradient norms agree, and prints the median ratios on/off of wall time and of this
process's CPU time (less sensitive to other processes on a shared machine).

    python benchmarks/packing.py --threads 2 --repeats 3
"""

from __future__ import annotations

import argparse
import random
import statistics

from _timing import interleaved_updates, update_bank

import evolora.generation.completion as scoring
import evolora.learner as learner
from evolora.generation.rollout import chat_prompt
from evolora.model import load_base
from evolora.tasks.gsm import GSMTask

TEACHER_COMPLETIONS = (
    66,
    52,
    22,
    70,
    109,
    37,
    54,
    80,
    68,
    35,
    108,
    50,
    36,
    41,
    58,
    47,
    61,
    28,
    35,
    62,
    67,
    58,
    55,
    82,
    116,
    63,
    71,
    109,
    56,
    30,
    23,
    109,
)
"""Sampled teacher tokens (problem + program + printed expression) of steps 1-4 of a default gsm
run (``runs/gsm7-a``, seed 0); the forced fence and ``print(`` add 7 tokens to each."""


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--groups", type=int, default=2, help="learnable groups per student")
    parser.add_argument("--student-tokens", type=int, default=96)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    return parser.parse_args()


def _data(args, tokenizer) -> dict[str, list[learner.Sample]]:
    rng = random.Random(0)
    task = GSMTask(example_set="simple", num_examples=2)
    vocab = len(tokenizer)

    def tokens(n: int) -> tuple[int, ...]:
        return tuple(rng.randrange(vocab) for _ in range(n))

    data = {}
    for slot in ("T0", "T1"):
        data[slot] = []
        for i in range(4):
            request = task.proposal_request(rng)
            prompt = tuple(chat_prompt(tokenizer, request.messages, request.prefix))
            completion = tokens(rng.choice(TEACHER_COMPLETIONS) + 7)
            data[slot].append(learner.Sample(prompt, completion, float(i % 3), slot))
    for slot in ("S0", "S1"):
        data[slot] = []
        for g in range(args.groups):
            prompt = tuple(chat_prompt(tokenizer, task.solve_prompt(rng.choice(task.examples)["problem"])))
            for i in range(4):
                length = (
                    args.student_tokens
                    if rng.random() < 0.75
                    else rng.randint(min(40, args.student_tokens), args.student_tokens)
                )
                data[slot].append(learner.Sample(prompt, tokens(length), float(i % 2), f"{slot}:{g}"))
    return data


def _plan(bank, data, micro_batch) -> str:
    rows = [(slot, sample, 1.0) for slot, samples in data.items() for sample in samples]
    parts = []
    for chunk in learner.micro_batches(bank, rows, micro_batch):
        names, samples = learner._names_samples(chunk)
        checkpointed = learner._layout(bank, names, samples)[1]
        parts.append(f"{len(chunk)}x{min(scoring.decoder_tokens(bank, names, samples))}{'*' if checkpointed else ''}")
    return " ".join(parts)


def main() -> None:
    args = _arguments()
    model, tokenizer = load_base(args.model, num_threads=args.threads)
    bank = update_bank(model, ["T0", "T1", "S0", "S1"])
    data = _data(args, tokenizer)
    for pack in (False, True):
        learner.PACK_TOKENS = pack
        print(
            f"packing {'on ' if pack else 'off'}: micro-batches (rows x decoder tokens, * checkpointed): "
            + _plan(bank, data, args.micro_batch)
        )
    times, cpu, norms = interleaved_updates(
        bank, data, lambda on: setattr(learner, "PACK_TOKENS", on), repeats=args.repeats, micro_batch=args.micro_batch
    )
    for pack in (True, False):
        print(
            f"packing {'on ' if pack else 'off'}: wall "
            + " ".join(f"{t:.2f}" for t in times[pack])
            + " s, process CPU "
            + " ".join(f"{t:.2f}" for t in cpu[pack])
            + " s"
        )
    gap = max(abs(norms[True][s] / norms[False][s] - 1) for s in norms[True] if norms[False][s] > 0)
    print(f"largest relative gradient-norm difference on/off {gap:.1e}")
    print(f"ratio packed/rows update CPU time: {statistics.median(cpu[True]) / statistics.median(cpu[False]):.3f}x")
    print(f"ratio packed/rows update time: {statistics.median(times[True]) / statistics.median(times[False]):.3f}x")


if __name__ == "__main__":
    main()
