"""Population overhead: seconds per adapter-sample of a full self-play step, 4T+4S vs one pair.

What is timed: ``Run.run_step()`` — teacher rollout, verification, student rollout, the
policy update of every adapter, ratings, and (population only) evolution. Two setups run
side by side in one process, alternating step by step so load drift hits both alike:

* **population**: ``--teachers`` teachers + ``--students`` students (default 4 + 4),
  ``--proposals`` proposals per teacher, ``--samples`` student answers per problem;
* **single**: the smallest setup the loop allows, 1 teacher + 1 student (one adapter per
  role, AZR's single agent split in two), with ``teachers × proposals`` proposals.

Compute matching: both setups produce the *same* number of samples per step (teacher
samples T·p, student samples T·p·n) with the same prompt and completion lengths, the same
generation batch size and the same micro-batch, so they do identical model work; the only
differences are what a population costs — more adapters routed per batch, one optimizer
step per adapter, more ratings, and evolution. Seconds per adapter-sample =
step seconds / samples trained; the ratio population / single is the overhead
(target <= 1.10x; the PopuLoRA paper reports 1.31x).

To make the work identical and not reward-dependent:
* a toy task (defined here) where every non-empty proposal is a valid problem, so students
  always play and train;
* ``min_new_tokens = max_new_tokens`` for teachers and students: every row has the same length;
* ``learner.kl_coef`` > 0 (default 0.01): GRPO skips samples with zero advantage unless a
  KL term is on, so with it every sample trains in both setups (both pay the extra
  no-grad reference forward).
Evolution runs every step in the population (``evolution.every = 1``); its cost is
reported separately and amortised over ``--evolve-every`` steps (default 10, the config
default) in the ratio.

    python benchmarks/population_overhead.py --model smollm2-135m-instruct --threads 2
    python benchmarks/population_overhead.py --model tiny-random
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile

import torch

from evolora.config import config_from_dict
from evolora.model import load_base
from evolora.run import Run
from evolora.tasks.toy import ToyTask


def build_run(args, teachers: int, students: int, proposals: int, out_dir: str) -> Run:
    model, tokenizer = load_base(args.model, dtype=args.dtype)
    model.generation_config.min_new_tokens = args.tokens  # every row generates exactly --tokens
    config = config_from_dict(
        {
            "model": {"name": args.model, "dtype": args.dtype},
            "lora": {"rank": args.rank, "alpha": 2 * args.rank},
            "population": {"teachers": teachers, "students": students},
            "run": {"seed": 0},
            "selfplay": {
                "proposals_per_teacher": proposals,
                "samples_per_problem": args.samples,
                "roles": {"teacher": {"max_new_tokens": args.tokens}, "student": {"max_new_tokens": args.tokens}},
                "generation_batch_size": args.generation_batch,
            },
            "learner": {"lr": 1e-5, "kl_coef": args.kl_coef, "micro_batch": args.micro_batch},
            # the single pair never evolves (nothing to select from); the population evolves every step
            "evolution": {"every": 1} if min(teachers, students) > 1 else {"every": 10**9, "gamma": 0.0},
            "eval": {"enabled": False},
        }
    )
    return Run(config, out_dir, model=model, tokenizer=tokenizer, task=ToyTask())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--teachers", type=int, default=4)
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--proposals", type=int, default=2, help="proposals per teacher in the population")
    parser.add_argument("--samples", type=int, default=4, help="student answers per problem (group size)")
    parser.add_argument("--tokens", type=int, default=24, help="new tokens per row, teachers and students")
    parser.add_argument("--generation-batch", type=int, default=16)
    parser.add_argument("--micro-batch", type=int, default=4)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--kl-coef", type=float, default=0.01)
    parser.add_argument("--evolve-every", type=int, default=10, help="amortise evolution over this many steps")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per setup (after one warm-up)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            "population": build_run(args, args.teachers, args.students, args.proposals, f"{tmp}/population"),
            "single": build_run(args, 1, 1, args.teachers * args.proposals, f"{tmp}/single"),
        }
        records: dict[str, list[dict]] = {name: [] for name in runs}
        for step in range(args.steps + 1):  # step 0 is a warm-up, alternating setups
            for name, run in runs.items():
                record, _ = run.run_step()
                print(
                    f"step {step} {name}: " + ", ".join(f"{k} {v:.2f}s" for k, v in record["seconds"].items()),
                    file=sys.stderr,
                    flush=True,
                )
                if step > 0:
                    records[name].append(record)

    print(
        f"\nSelf-play step: {args.model} ({args.dtype}), {args.threads} threads, {args.tokens} tokens per row, "
        f"n = {args.samples}, median of {args.steps} steps"
    )
    header = ["setup", "adapters", "samples", "valid", "rollout", "verify", "train", "evolve", "total", "s/sample"]
    print(f"{header[0]:<12}" + "".join(f"{h:>10}" for h in header[1:]))
    per_sample: dict[str, float] = {}
    per_sample_no_evolve: dict[str, float] = {}
    for name, recs in records.items():
        samples = [sum(r["trained_samples"].values()) for r in recs]
        parts = {
            key: statistics.median(r["seconds"].get(key, 0.0) for r in recs)
            for key in ("rollout_teacher", "rollout_student", "verify", "train", "evolve", "total")
        }
        evolve_share = parts["evolve"] * (1 - 1 / args.evolve_every)  # run_step evolved every step
        totals = [r["seconds"]["total"] - r["seconds"]["evolve"] * (1 - 1 / args.evolve_every) for r in recs]
        count = statistics.median(samples)
        per_sample[name] = statistics.median(t / s for t, s in zip(totals, samples))
        per_sample_no_evolve[name] = statistics.median(
            (r["seconds"]["total"] - r["seconds"]["evolve"]) / s for r, s in zip(recs, samples)
        )
        adapters = len(runs[name].population.members)
        valid = statistics.median(r["validity_rate"] for r in recs)
        row = [
            adapters,
            f"{count:.0f}",
            f"{valid:.2f}",
            f"{parts['rollout_teacher'] + parts['rollout_student']:.2f}",
            f"{parts['verify']:.3f}",
            f"{parts['train']:.2f}",
            f"{parts['evolve'] / args.evolve_every:.3f}",
            f"{parts['total'] - evolve_share:.2f}",
            f"{per_sample[name]:.4f}",
        ]
        print(f"{name:<12}" + "".join(f"{str(v):>10}" for v in row))
    ratio = per_sample["population"] / per_sample["single"]
    ratio_no_evolve = per_sample_no_evolve["population"] / per_sample_no_evolve["single"]
    print(f"(evolve column: evolution seconds / {args.evolve_every}, its cost amortised per step)")
    print(f"ratio without evolution: {ratio_no_evolve:.2f}x")
    print(f"ratio population/single seconds per adapter-sample: {ratio:.2f}x (target <= 1.10x, paper 1.31x)")


if __name__ == "__main__":
    main()
