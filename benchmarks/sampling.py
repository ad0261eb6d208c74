"""Per-role sampling temperatures, measured: teacher validity and student group signal.

For each temperature T it prints, on the base model:
* teacher: share of proposals that parse and verify, distinct problems, and the share that
  copy an example of their own prompt (``--proposals`` prompts);
* student: sampled solve rate over ``--problems`` held-out items × ``--n`` samples, and the
  share of groups with 0 < ŝ < 1 (the only groups that carry a GRPO gradient).
A ratio line compares each T with T = 1.0, measured side by side in one process.

    python benchmarks/sampling.py --task arith --temperatures 0.3 0.5 0.7 1.0
    python benchmarks/sampling.py --task gsm --set structured=true example_set=simple forced_print=true \
        program_temperature=0.2 --temperatures 0.5 0.8 --teacher-tokens 96 --skip student
    python benchmarks/sampling.py --task gsm --set example_set=simple --skip teacher \
        --student-items examples --problems 16 --n 4 --student-tokens 128 --temperatures 0.4 0.7 1.0
    python benchmarks/sampling.py --task gsm --set example_set=simple --skip teacher --student-items examples \
        --problems 16 --n 8 --student-tokens 128 --temperatures 0.4 --truncate 48 64 96   # answer budgets
"""

from __future__ import annotations

import argparse
import random
import time

import torch
import yaml

from evolora.bank.local import AdapterBank
from evolora.config import SelfPlayConfig
from evolora.generation.rollout import chat_prompt
from evolora.generation.routed import BASE
from evolora.generation.types import Sampling
from evolora.model import load_base
from evolora.selfplay import _teacher_rollout, proposal_request
from evolora.tasks import make_task
from evolora.tasks.base import HeldOutItem, normalise_problem


def teacher_stats(bank, tokenizer, task, temperature: float, proposals: int, max_new_tokens: int) -> dict:
    rng = random.Random(0)
    requests = [proposal_request(task, rng) for _ in range(proposals)]
    config = SelfPlayConfig(
        roles={"teacher": {"temperature": temperature, "max_new_tokens": max_new_tokens}}, generation_batch_size=32
    )
    out = _teacher_rollout(bank, tokenizer, requests, [BASE] * proposals, config, None)  # routed (the default)
    parsed = [task.parse_proposal(r.prefix + c.text) for r, c in zip(requests, out)]
    verdicts = task.verify(parsed)
    valid = [p for p, v in zip(parsed, verdicts) if v.valid]
    copied = [
        p
        for p, r in zip(parsed, requests)
        if p is not None and normalise_problem(p.problem) in {normalise_problem(e) for e in r.examples}
    ]
    reasons: dict[str, int] = {}
    for v in verdicts:
        reasons[v.reason] = reasons.get(v.reason, 0) + 1
    return {
        "validity": len(valid) / proposals,
        "distinct": len({normalise_problem(p.problem) for p in valid}),
        "copied": len(copied) / proposals,
        "reasons": reasons,
        "example": next((p.problem[:80] for p in valid), None),
    }


def student_stats(
    bank,
    tokenizer,
    task,
    temperature: float,
    problems: int,
    n: int,
    max_new_tokens: int,
    items_from: str = "held_out",
    truncate: tuple[int, ...] = (),
) -> dict:
    if items_from == "examples":  # the gsm task's own reference problems (program answers)
        items = [HeldOutItem(e["problem"], float(e["answer"])) for e in task.examples[:problems]]
    else:
        items = task.held_out(problems, random.Random(0))
    prompts = [chat_prompt(tokenizer, task.solve_prompt(item.question)) for item in items for _ in range(n)]
    out = bank.rollout(
        prompts, [BASE] * len(prompts), Sampling(max_new_tokens=max_new_tokens, temperature=temperature), batch_size=32
    )
    row = _graded(task, [c.text for c in out], items, n)
    for limit in truncate:  # the first `limit` tokens of a sample are a sample under a `limit`-token budget
        cut = [tokenizer.decode(c.completion_ids[:limit], skip_special_tokens=True) for c in out]
        row.update({f"{key}@{limit}": value for key, value in _graded(task, cut, items, n).items()})
    return row


def _graded(task, texts: list[str], items, n: int) -> dict:
    correct = [task.grade(text, items[k // n].answer).label == "correct" for k, text in enumerate(texts)]
    rates = [sum(correct[i * n : (i + 1) * n]) / n for i in range(len(items))]
    return {"solve": sum(correct) / len(correct), "learnable_groups": sum(0 < r < 1 for r in rates) / len(rates)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--task", default="arith")
    parser.add_argument("--set", nargs="*", default=[], help="task params as key=value (YAML values)")
    parser.add_argument("--temperatures", nargs="+", type=float, default=[0.3, 0.5, 0.7, 1.0])
    parser.add_argument("--proposals", type=int, default=32)
    parser.add_argument("--problems", type=int, default=36)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--teacher-tokens", type=int, default=24)
    parser.add_argument("--student-tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip", choices=["teacher", "student"], default=None)
    parser.add_argument(
        "--student-items",
        choices=["held_out", "examples"],
        default="held_out",
        help="student problems: held-out items, or the gsm task's reference examples",
    )
    parser.add_argument(
        "--truncate",
        nargs="*",
        type=int,
        default=[],
        help="also grade each student sample cut to its first K tokens (a K-token budget)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    params = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
    task = make_task(args.task, **params)
    model, tokenizer = load_base(args.model)
    bank = AdapterBank(model, ["a0"], rank=2, alpha=4, target_modules=("q_proj",), tokenizer=tokenizer)
    rows = {}
    for t in args.temperatures:
        began = time.perf_counter()
        torch.manual_seed(0)
        row = (
            {}
            if args.skip == "teacher"
            else teacher_stats(bank, tokenizer, task, t, args.proposals, args.teacher_tokens)
        )
        if args.skip != "student":
            row.update(
                student_stats(
                    bank,
                    tokenizer,
                    task,
                    t,
                    args.problems,
                    args.n,
                    args.student_tokens,
                    args.student_items,
                    tuple(args.truncate),
                )
            )
        rows[t] = row
        print(f"T={t:.2f} {row} ({time.perf_counter() - began:.0f} s)", flush=True)
    if 1.0 in rows:
        for t, row in rows.items():
            ratios = {
                k: round(v / rows[1.0][k], 2) if rows[1.0][k] else None for k, v in row.items() if isinstance(v, float)
            }
            print(f"ratio T={t:.2f} vs T=1.00: {ratios}")


if __name__ == "__main__":
    main()
