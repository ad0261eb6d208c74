"""Held-out decode batches at two position budgets, measured side by side in one process.

``evolora.evaluation.held_out.EVAL_POSITIONS_PER_ROW`` bounds an evaluation batch at that many decoder
positions (rows × (longest prompt + new tokens)) per row of the engine's default batch (16 on a
CPU). This script evaluates the base greedily on the same gsm test problems once per budget,
in order, and prints each one's CPU time, wall time and peak RSS (cumulative: each run's figure
is the largest so far, so give the budgets smallest first), whether the answers are the same,
and the ratio of the last budget's CPU time to the first's.

    OMP_NUM_THREADS=1 python benchmarks/eval_budget.py --threads 1 --limit 48 --budgets 6144 16384
"""

from __future__ import annotations

import argparse
import random
import resource
import time

import evolora.evaluation.held_out as evaluation
from evolora.bank.local import AdapterBank
from evolora.generation.routed import BASE
from evolora.model import load_base
from evolora.tasks import make_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--limit", type=int, default=48, help="gsm test problems (one row each)")
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--batch", type=int, default=48, help="rows per batch at most (eval.batch_size)")
    parser.add_argument(
        "--budgets", type=int, nargs="+", default=[6144, 16384], help="decoder positions per batch, smallest first"
    )
    args = parser.parse_args()
    model, tokenizer = load_base(args.model, dtype=args.dtype, num_threads=args.threads)
    task = make_task("gsm")
    items = task.held_out(args.limit, random.Random(0))
    bank = AdapterBank(model, ["unused"], rank=8, alpha=16, target_modules="all-linear", tokenizer=tokenizer)
    texts, cpu = {}, {}
    for budget in args.budgets:
        evaluation.EVAL_POSITIONS_PER_ROW = budget / bank.batch_size  # evaluate() reads it per call
        began, wall = time.process_time(), time.perf_counter()
        result = evaluation.evaluate(
            bank, tokenizer, task, items, [BASE], max_new_tokens=args.max_new_tokens, batch_size=args.batch
        )[BASE]
        cpu[budget], texts[budget] = time.process_time() - began, result.texts
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"budget {budget}: CPU {cpu[budget]:.1f} s, wall {time.perf_counter() - wall:.1f} s, "
            f"correct {result.correct}/{result.total}, peak RSS so far {rss:.0f} MB",
            flush=True,
        )
    first, last = args.budgets[0], args.budgets[-1]
    same = sum(a == b for a, b in zip(texts[first], texts[last]))
    print(f"same answers at {first} and {last} positions: {same} of {len(items)}")
    print(f"ratio CPU time {last}/{first} positions: {cpu[last] / cpu[first]:.2f}x")


if __name__ == "__main__":
    main()
