"""How far can RL sharpening go? Sampled pass@k of the base and of a run's members on the held-out set.

RL with verifiable rewards mostly turns what a model can already sample into what it answers
greedily: a problem the base never solves in k samples is rarely learned by a small run. So
the base's pass@k on the held-out set is a rough ceiling for the greedy accuracy a run can
reach, and a member's pass@k against the base's shows whether training widened the set of
solvable problems or only sharpened it.

    python benchmarks/pass_at_k.py runs/study-v3/population-s0 --members s2 --samples 8 --temperature 0.5

Prints, for the base and each member: greedy accuracy, sampled pass@1 (mean over samples),
pass@k for k = 1, 2, 4, ..., n (the unbiased estimator 1 − C(n−c, k) / C(n, k) of Chen et al.,
arXiv 2107.03374, §2.1, averaged over problems), and per held-out cell (arith: digits ×
operators) the problems solved greedily and at least once in n samples. Everything is
measured in one process on the same prompts and the same seeded generator.

``--set KEY=VALUE`` changes the run's config before loading, e.g. another student prompt or
answer budget for the base alone (no ``--members``)::

    python benchmarks/pass_at_k.py runs/study-stop/population-s0 --samples 4 --set eval.max_new_tokens=48 \
        --set 'task.params.student_instruction="Work it out step by step, then write: The answer is N."'
"""

from __future__ import annotations

import argparse
import random
import re
import time
from pathlib import Path

from evolora.evaluation.sampled import pass_at_k


def _correct(task, tokenizer, bank, items, names, *, samples: int, temperature: float, tokens: int, seed: int):
    """{name: (greedy correct per problem, sampled correct counts per problem)}."""
    from evolora.evaluation.sampled import correct_counts

    options = dict(temperature=temperature, max_new_tokens=tokens, batch_size=32, seed=seed)
    greedy = correct_counts(bank, tokenizer, task, items, names, samples=1, greedy=True, **options)
    sampled = correct_counts(bank, tokenizer, task, items, names, samples=samples, **options)
    return {name: [greedy[name], sampled[name]] for name in names}


def _arith_cell(item) -> str:
    """An arith held-out problem's grid cell: "<digits>d x <operators>op"."""
    digits = max(len(run) for run in re.findall(r"[0-9]+", item.question))
    return f"{digits}d x {sum(item.question.count(op) for op in '+-*')}op"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a finished run directory (config.yaml, final/<member>/)")
    parser.add_argument("--members", default="", help="comma-separated member ids in final/ (default: none, base only)")
    parser.add_argument("--samples", type=int, default=8, help="n samples per problem (>= 1)")
    parser.add_argument("--temperature", type=float, default=0.5, help="sampling temperature (> 0)")
    parser.add_argument("--limit", type=int, default=None, help="held-out problems (default: the run's eval.limit)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override the run's config (repeatable), e.g. eval.max_new_tokens=48",
    )
    args = parser.parse_args()
    if args.samples < 1 or args.temperature <= 0:
        raise SystemExit("--samples must be >= 1 and --temperature > 0")
    members = [m for m in args.members.split(",") if m]
    from evolora.config import ConfigError
    from evolora.evaluation.rerun import load_members

    try:
        config, task, tokenizer, bank = load_members(
            args.run, members, num_threads=args.threads, overrides=args.overrides
        )
    except FileNotFoundError as error:
        raise SystemExit(f"{error}; name members saved in final/") from None
    except ConfigError as error:
        raise SystemExit(f"--set: {error}") from None
    items = task.held_out(args.limit or config.eval.limit, random.Random(config.run.seed))
    names = [*members, "__base__"]
    began = time.perf_counter()
    counts = _correct(
        task,
        tokenizer,
        bank,
        items,
        names,
        samples=args.samples,
        temperature=args.temperature,
        tokens=config.eval.max_new_tokens,
        seed=args.seed,
    )
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= args.samples]
    print(
        f"{len(items)} held-out problems, n = {args.samples} samples at T = {args.temperature}, "
        f"{config.eval.max_new_tokens} tokens ({time.perf_counter() - began:.0f} s)"
    )
    print("name      greedy  sampled  " + "  ".join(f"pass@{k:<3d}" for k in ks))
    for name in names:
        greedy, sampled = counts[name]
        row = [sum(pass_at_k(args.samples, c, k) for c in sampled) / len(items) for k in ks]
        print(
            f"{'base' if name == '__base__' else name:8s}  {sum(greedy) / len(items):6.3f}  "
            f"{sum(sampled) / (len(items) * args.samples):7.3f}  " + "  ".join(f"{v:8.3f}" for v in row)
        )
    if config.task.name == "arith":
        cells = _arith_cell
        print("per cell (greedy / solved at least once):")
        for cell in dict.fromkeys(cells(item) for item in items):
            idx = [i for i, item in enumerate(items) if cells(item) == cell]
            parts = [
                f"{'base' if n == '__base__' else n} {sum(counts[n][0][i] for i in idx)}/"
                f"{sum(counts[n][1][i] > 0 for i in idx)}"
                for n in names
            ]
            print(f"  {cell}: " + ", ".join(parts) + f" of {len(idx)}")
    task.close()


if __name__ == "__main__":
    main()
