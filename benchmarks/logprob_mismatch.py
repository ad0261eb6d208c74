"""Rollout vs update log-probs, fp32 and bf16: the error floor of the learner's importance ratio.

For each dtype, one batch of sampled completions (temperature 1, P adapters, rows interleaved),
and per completion token, in nats:
  * sampler − update: the log-prob the decoder sampled the token with (KV-cached, routed inference
    path) against the update's forward of the whole sequence (training path, fp32 factors);
  * inference − update: the same samples through the no-grad routed path that gives the learner's
    ``old`` log-probs (:mod:`evolora.generation.mismatch`);
  * dtype − fp32: the update's log-probs against the fp32 model's, on the fp32 samples.

    python benchmarks/logprob_mismatch.py --threads 1
    python benchmarks/logprob_mismatch.py --model tiny-random
"""

from __future__ import annotations

import argparse

import torch

import evolora.generation.decode as decode
from evolora.bank.local import AdapterBank
from evolora.generation.decode import choose_tokens
from evolora.generation.mismatch import path_gap, path_logprobs, summarize
from evolora.generation.rollout import chat_prompt
from evolora.generation.types import Sampling
from evolora.learner import Sample
from evolora.model import load_base


class Recorder:
    """Wraps :func:`choose_tokens`: per decode call, the log-prob of each token the sampler chose."""

    def __init__(self) -> None:
        self.steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def __call__(self, logits, rows, total, sampling, generator=None):
        token = choose_tokens(logits, rows, total, sampling, generator)
        logp = torch.log_softmax(logits.float(), dim=-1).gather(1, token[:, None])[:, 0]
        self.steps.append((rows.clone(), token.clone(), logp))
        return token

    def per_row(self, batch: int) -> list[list[tuple[int, float]]]:
        out: list[list[tuple[int, float]]] = [[] for _ in range(batch)]
        for rows, tokens, logps in self.steps:
            for row, token, logp in zip(rows.tolist(), tokens.tolist(), logps.tolist()):
                out[row].append((token, logp))
        return out


def sampled(bank, tokenizer, names, tokens, seed):
    """Completions of one prompt, one row per adapter name, and the sampler's log-probs of their tokens."""
    prompt = chat_prompt(tokenizer, [{"role": "user", "content": "Write a short story about a robot who counts."}])
    recorder = Recorder()
    decode.choose_tokens = recorder
    try:
        done = bank.rollout(
            [prompt] * len(names),
            names,
            Sampling(max_new_tokens=tokens),
            batch_size=len(names),
            generator=torch.Generator().manual_seed(seed),
        )
    finally:
        decode.choose_tokens = choose_tokens
    rows = recorder.per_row(len(names))
    samples, sampler = [], []
    for completion in done:  # match each completion to the decode row whose tokens it holds
        ids = list(completion.completion_ids)
        row = next(r for r in rows if [t for t, _ in r[: len(ids)]] == ids)
        rows.remove(row)
        samples.append(Sample(tuple(completion.prompt_ids), tuple(ids), 0.0, "g"))
        sampler.append(torch.tensor([lp for _, lp in row[: len(ids)]]))
    return samples, [c.adapter for c in done], sampler


def build(model_name, dtype, adapters, b_std, prepack=False):
    model, tokenizer = load_base(model_name, dtype=dtype, prepack=prepack)
    slots = [f"A{i}" for i in range(adapters)]
    bank = AdapterBank(model, slots, rank=8, alpha=16, target_modules="all-linear", tokenizer=tokenizer)
    generator = torch.Generator().manual_seed(0)
    for slot in slots:
        bank.init_factors(slot, generator, b_std=b_std)
    return bank, tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--adapters", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--b-std", type=float, default=0.02, help="std of B (a trained adapter's scale; init is 1e-3)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--prepack",
        choices=["false", "true"],
        default="false",
        help="the LM head packed by oneDNN (model.prepack: evolora.model.prepack) in both dtypes",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    names = [f"A{i % args.adapters}" for i in range(args.batch)]
    reference = None
    print(
        f"{args.model}, {args.adapters} adapters (B std {args.b_std}), batch {args.batch}, "
        f"{args.tokens} tokens; |gap| per token in nats: mean / p99 / max"
    )
    for dtype in ("float32", "bfloat16"):
        bank, tokenizer = build(args.model, dtype, args.adapters, args.b_std, prepack=args.prepack == "true")
        samples, rows, sampler = sampled(bank, tokenizer, names, args.tokens, seed=1)
        update, mask = path_logprobs(bank, rows, samples, train=True)
        gaps = {
            "sampler - update": torch.cat([(s - u[m]).abs() for s, u, m in zip(sampler, update, mask)]),
            "inference - update": path_gap(bank, rows, samples),
        }
        if reference is None:
            reference = (samples, rows, update[mask])
        else:
            theirs, _ = path_logprobs(bank, reference[1], reference[0], train=True)
            gaps[f"{dtype} - float32 (update)"] = (theirs[_] - reference[2]).abs()
        for name, gap in gaps.items():  # the ratio lines
            s = summarize(gap)
            print(
                f"{dtype:<9} {name:<30} {s['mean']:.2e} / {s['p99']:.2e} / {s['max']:.2e}"
                f"   ratio within [{1 / s['ratio_max']:.4f}, {s['ratio_max']:.4f}]"
            )


if __name__ == "__main__":
    main()
