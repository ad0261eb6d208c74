"""RL step: evolora's policy update vs TRL's GRPOTrainer, one adapter, same work.

Both sides train one LoRA adapter (same rank, alpha, target modules, no dropout) on the
same base model, the same chat prompts, group size ``--group``, ``--prompts`` prompts per
step, exactly ``--tokens`` completion tokens per row (TRL gets ``min_new_tokens`` through
``generation_kwargs``), one forward/backward over all ``prompts × group`` rows per step
(evolora's ``micro_batch`` = TRL's ``per_device_train_batch_size``), AdamW, no KL (beta 0),
one iteration per generation, no gradient checkpointing (TRL's default turns it on; that
would only slow TRL down and is not what is being compared).

What is measured:
* TRL: the wall-clock of each training step (callback ``on_step_begin`` → ``on_step_end``,
  so it includes the optimizer step), minus the time spent inside
  ``_generate_and_score_completions`` (generation, reward, advantages). The difference is
  TRL's update cost: forward/backward, loss, optimizer, bookkeeping.
* evolora: ``policy_update_many`` for one adapter on samples of the same shape (the same
  prompts; completions of ``--tokens`` tokens; rewards varying within each group so every
  row carries gradient, as TRL trains every row).
Time per sample = update seconds / (prompts × group); median over ``--steps`` steps after
one warm-up step on each side. Target: evolora / TRL <= 0.8x.

Dev-only dependency: ``pip install --no-deps trl`` (1.16.0 works with transformers 5.24 /
peft 0.21.2) plus ``datasets`` (pip install datasets with the installed torch/transformers
pinned as constraints).

    python benchmarks/rl_step.py --model smollm2-135m-instruct --threads 2
    python benchmarks/rl_step.py --model tiny-random
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import warnings

import torch

from evolora.bank.local import AdapterBank
from evolora.generation.rollout import chat_prompt
from evolora.learner import Sample, make_optimizer, policy_update_many
from evolora.model import load_base

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def questions(count: int) -> list[str]:
    return [f"What is {i % 9 + 1}+{(i * 7) % 9 + 1}? Answer with a number." for i in range(count)]


def time_trl(args) -> dict[str, list[float]]:
    """Per-step seconds of TRL's GRPOTrainer: whole step and its generation+scoring part."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = load_base(args.model)
    steps = args.steps + 1
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": q}]} for q in questions(args.prompts * steps)])

    def reward(completions, **kwargs):  # varies within each group, so every row carries gradient
        return [float(i % 2) for i in range(len(completions))]

    times: dict[str, list[float]] = {"step": [], "generate": []}

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            times["_began"] = [time.perf_counter()]

        def on_step_end(self, *a, **k):
            times["step"].append(time.perf_counter() - times.pop("_began")[0])

    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=args.prompts * args.group,
            num_generations=args.group,
            max_completion_length=args.tokens,
            generation_kwargs={"min_new_tokens": args.tokens},
            temperature=1.0,
            learning_rate=1e-5,
            lr_scheduler_type="constant",
            beta=0.0,
            epsilon=0.2,
            max_grad_norm=1.0,
            num_iterations=1,
            gradient_checkpointing=False,
            use_cpu=True,
            bf16=False,
            max_steps=steps,
            logging_steps=10**6,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            seed=0,
            dataloader_num_workers=0,
        )
        lora = LoraConfig(
            r=args.rank,
            lora_alpha=2 * args.rank,
            target_modules=list(MODULES),
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=lora,
            callbacks=[StepTimer()],
        )
        inner = trainer._generate_and_score_completions

        def timed_generation(*a, **k):
            began = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                times["generate"].append(time.perf_counter() - began)

        trainer._generate_and_score_completions = timed_generation
        torch.set_num_threads(args.threads)  # the Trainer may have changed it
        trainer.train()
    return {key: value[1:] for key, value in times.items()}  # drop the warm-up step


def time_evolora(args) -> list[float]:
    """Per-step seconds of ``policy_update_many`` for one adapter on TRL-shaped samples."""
    model, tokenizer = load_base(args.model)
    bank = AdapterBank(model, ["A0"], rank=args.rank, alpha=2 * args.rank, target_modules=MODULES)
    bank.init_factors("A0", torch.Generator().manual_seed(0), b_std=1e-3)
    optimizer = make_optimizer(bank.parameters("A0"), lr=1e-5, weight_decay=0.0)
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    times = []
    steps = args.steps + 1
    for step, batch in enumerate(range(0, args.prompts * steps, args.prompts)):
        samples = []
        for q in questions(args.prompts * steps)[batch : batch + args.prompts]:
            prompt = tuple(chat_prompt(tokenizer, [{"role": "user", "content": q}]))
            for i in range(args.group):
                completion = tuple(torch.randint(3, vocab, (args.tokens,), generator=generator).tolist())
                samples.append(Sample(prompt, completion, float(i % 2), q))
        began = time.perf_counter()
        policy_update_many(
            bank, {"A0": (optimizer, samples)}, micro_batch=args.prompts * args.group, clip_eps=0.2, max_grad_norm=1.0
        )
        times.append(time.perf_counter() - began)
    return times[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step")
    parser.add_argument("--group", type=int, default=4, help="completions per prompt (GRPO group size)")
    parser.add_argument("--tokens", type=int, default=64, help="completion tokens per row")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per side (after one warm-up)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)

    ours = time_evolora(args)
    trl = time_trl(args)
    rows = args.prompts * args.group
    trl_update = [s - g for s, g in zip(trl["step"], trl["generate"])]
    table = {
        "TRL GRPOTrainer, whole step": statistics.median(trl["step"]),
        "TRL generate + score": statistics.median(trl["generate"]),
        "TRL update (step - generate)": statistics.median(trl_update),
        "evolora policy_update_many": statistics.median(ours),
    }
    print(
        f"\nRL step: {args.model}, 1 adapter (rank {args.rank}), {args.prompts} prompts x group {args.group}, "
        f"{args.tokens} completion tokens, {args.threads} threads, median of {args.steps} steps"
    )
    print(f"{'path':<32}{'s/step':>9}{'s/sample':>10}")
    for name, seconds in table.items():
        print(f"{name:<32}{seconds:>9.2f}{seconds / rows:>10.3f}")
    ratio = table["evolora policy_update_many"] / table["TRL update (step - generate)"]
    print(f"ratio evolora/TRL update time per sample: {ratio:.2f}x (target <= 0.80x)")


if __name__ == "__main__":
    main()
