"""Mixed-adapter rollouts and batched training: evolora's routed LoRA vs PEFT vs the bare base.

Prints, measured side by side in one run (the machines are noisy, so read the ratios):
  * generation tokens/s of one batch spread over P adapters: base (the PEFT model with its
    adapters switched off: ``routed`` with every row on ``__base__`` adds no hooks), PEFT
    ``adapter_names``, evolora routed — and each ratio to the base at the same batch size and lengths;
  * one policy update of P adapters on the same samples: PEFT one adapter at a time
    (set_adapter + forward/backward per adapter) vs evolora's routed batched update.

    python benchmarks/throughput.py --model smollm2-135m-instruct --adapters 4 --batch 8 --tokens 48
    python benchmarks/throughput.py --model smollm2-135m-instruct --adapters 8 --batch 8 --tokens 24 --threads 1
    python benchmarks/throughput.py --model tiny-random
"""

from __future__ import annotations

import argparse
import statistics

import torch
from _timing import median_seconds  # benchmarks/_timing.py (scripts run from benchmarks/)

import evolora.generation.routed as routed_module
from evolora.bank.local import AdapterBank
from evolora.generation.engine import PeftEngine
from evolora.generation.rollout import chat_prompt
from evolora.generation.routed import BASE
from evolora.generation.types import Sampling
from evolora.learner import Sample, completion_logprobs, make_optimizer, policy_update_many
from evolora.model import load_base

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def peft_sequential_update(bank, jobs, micro_batch):
    """The plain PEFT way: activate one adapter, forward/backward its samples, step; next adapter."""
    for slot, (optimizer, samples) in jobs.items():
        bank.activate(slot)
        bank.model.train()
        optimizer.zero_grad()
        for i in range(0, len(samples), micro_batch):
            chunk = samples[i : i + micro_batch]
            logp, mask = completion_logprobs(bank.model, chunk)
            adv = torch.tensor([s.reward for s in chunk]).unsqueeze(1)
            (-(logp * adv * mask).sum() / mask.sum()).backward()
        optimizer.step()
    bank.model.eval()


def with_lora_dtype(call, dtype):
    """``call`` with the routed inference path's LoRA matmuls in ``dtype``."""

    def run():
        routed_module.LORA_COMPUTE_DTYPE = dtype
        try:
            return call()
        finally:
            routed_module.LORA_COMPUTE_DTYPE = None

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--adapters", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=48, help="new tokens per row (min = max)")
    parser.add_argument("--train-samples", type=int, default=4, help="samples per adapter in the update")
    parser.add_argument("--completion", type=int, default=96, help="completion tokens per training sample")
    parser.add_argument("--micro-batch", type=int, default=4, help="rows per forward/backward in both paths")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--grouped",
        action="store_true",
        help="rows sorted by adapter (A0 A0 A1 A1 ...: routed views them, no gather) "
        "instead of interleaved (A0 A1 A2 A3 A0 ...)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_base(args.model, dtype=args.dtype)
    slots = [f"A{i}" for i in range(args.adapters)]
    bank = AdapterBank(model, slots, rank=8, alpha=16, target_modules=MODULES, tokenizer=tokenizer)
    peft = PeftEngine(bank.model, tokenizer, bank)
    generator = torch.Generator().manual_seed(0)
    for slot in slots:
        bank.init_factors(slot, generator, b_std=1e-3)
    prompt = chat_prompt(tokenizer, [{"role": "user", "content": "Write a short story about a robot who counts."}])
    prompts = [prompt] * args.batch
    mixed = [slots[i % len(slots)] for i in range(args.batch)]
    if args.grouped:
        mixed.sort(key=slots.index)
    model.generation_config.min_new_tokens = args.tokens  # every row generates exactly --tokens

    def gen(names, routed):
        engine = bank.engine if routed else peft
        return lambda: engine.generate(
            prompts, names, Sampling(max_new_tokens=args.tokens, greedy=True), batch_size=args.batch
        )

    gen([BASE] * args.batch, False)()  # warm-up
    calls = {
        "base model (adapters off)": gen([BASE] * args.batch, True),
        f"PEFT adapter_names, {args.adapters} adapters": gen(mixed, False),
        f"evolora routed, {args.adapters} adapters": gen(mixed, True),
    }
    if args.dtype != "float32":  # the LoRA matmuls in the base's dtype too (routed.LORA_COMPUTE_DTYPE)
        calls[f"routed, {args.dtype} LoRA matmuls"] = with_lora_dtype(gen(mixed, True), getattr(torch, args.dtype))
    # Round robin (base, PEFT, routed, base, ...): load swings on a shared machine hit every row
    # alike; "vs base" is the median over rounds of base seconds / row seconds in that round.
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.repeats):
        for name, call in calls.items():
            seconds[name].append(median_seconds(call, 1, warmup=False))
    tokens = args.batch * args.tokens
    base = seconds["base model (adapters off)"]
    print(
        f"\nGeneration: {args.model} ({args.dtype}), batch {args.batch} "
        f"({'grouped' if args.grouped else 'interleaved'} by adapter), {args.tokens} new tokens, "
        f"{args.threads} threads, median of {args.repeats} interleaved rounds"
    )
    print(f"{'path':<36}{'seconds':>9}{'tokens/s':>10}{'vs base':>9}")
    for name, times in seconds.items():
        ratio = statistics.median(b / t for b, t in zip(base, times))
        print(f"{name:<36}{statistics.median(times):>9.2f}{tokens / statistics.median(times):>10.1f}{ratio:>9.2f}")

    samples = [
        Sample(tuple(prompt), tuple(5 + (j % 90) for j in range(args.completion)), float(i % 2), "g")
        for i in range(args.train_samples)
    ]

    def jobs():
        return {s: (make_optimizer(bank.parameters(s), lr=1e-5, weight_decay=0.0), samples) for s in slots}

    update = {
        "PEFT, one adapter at a time": median_seconds(
            lambda: peft_sequential_update(bank, jobs(), args.micro_batch), args.repeats, warmup=False
        ),
        "evolora routed, all adapters": median_seconds(
            lambda: policy_update_many(bank, jobs(), micro_batch=args.micro_batch), args.repeats, warmup=False
        ),
    }
    peft = update["PEFT, one adapter at a time"]
    print(
        f"\nPolicy update: {args.adapters} adapters x {args.train_samples} samples x {args.completion} "
        f"completion tokens (prompt {len(prompt)}), micro-batch {args.micro_batch}"
    )
    print(f"{'path':<36}{'seconds':>9}{'speed-up':>10}")
    for name, seconds in update.items():
        print(f"{name:<36}{seconds:>9.2f}{peft / seconds:>10.2f}")


if __name__ == "__main__":
    main()
