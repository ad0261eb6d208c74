"""Sample gsm teacher proposals from the base model and write them, verified, as JSON lines.

The raw material of the gsm grounding set (``tests/data/gsm_labelled.jsonl``): each line holds
the problem, the program, the sandbox verdict (reason, answer) and the grounding reasons of
:mod:`evolora.tasks.gsm.grounding`. Prompts and sampling are those of the config's teacher.

    python benchmarks/gsm_proposals.py tasks/gsm.yaml --proposals 320 --out /tmp/gsm_proposals.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter

import torch

from evolora.bank.from_config import bank_from_config
from evolora.config import load_config
from evolora.generation.routed import BASE
from evolora.model import load_base
from evolora.selfplay import _teacher_rollout, proposal_request
from evolora.tasks import make_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("--proposals", type=int, default=320)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--set", nargs="*", default=[], help="config overrides, e.g. selfplay.roles.teacher.temperature=0.7"
    )
    parser.add_argument(
        "--sandbox-only",
        action="store_true",
        help="verify without the grounding rules (each line still lists the rules it breaks)",
    )
    args = parser.parse_args()
    config = load_config(args.config, args.set)
    task = make_task(config.task.name, **{**config.task.params, **({"grounding": False} if args.sandbox_only else {})})
    model, tokenizer = load_base(config.model.name, dtype=config.model.dtype, num_threads=config.model.num_threads)
    bank = bank_from_config(model, tokenizer, ["S0"], config)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    requests = [proposal_request(task, rng) for _ in range(args.proposals)]
    began = time.perf_counter()
    out = _teacher_rollout(bank, tokenizer, requests, [BASE] * len(requests), config.selfplay, None)
    parsed = [task.parse_proposal(r.prefix + c.text) for r, c in zip(requests, out)]
    verdicts = task.verify(parsed)
    from evolora.tasks.gsm.grounding import grounding_reasons

    with open(args.out, "w", encoding="utf-8") as f:
        for proposal, verdict in zip(parsed, verdicts):
            if proposal is None:
                continue
            reasons = grounding_reasons(proposal.problem, proposal.program, verdict.answer) if verdict.valid else []
            f.write(
                json.dumps(
                    {
                        "problem": proposal.problem,
                        "program": proposal.program,
                        "reason": verdict.reason,
                        "valid": verdict.valid,
                        "answer": verdict.answer,
                        "grounding": reasons,
                    }
                )
                + "\n"
            )
    valid = sum(v.valid for v in verdicts)
    print(
        f"{args.proposals} proposals in {time.perf_counter() - began:.0f} s: {sum(p is not None for p in parsed)} "
        f"parse, {valid} valid -> {args.out}"
    )
    print("reasons:", dict(Counter(v.reason for v in verdicts).most_common()))
    task.close()


if __name__ == "__main__":
    main()
