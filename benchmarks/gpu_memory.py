"""Expected GPU memory of a run config, computed from the model's shapes (no GPU, no download).

    python benchmarks/gpu_memory.py                                   # tasks/gsm-gpu.yaml, Qwen2.5-0.5B shapes
    python benchmarks/gpu_memory.py tasks/gsm.yaml --model-config path/to/config.json --prompt-tokens 400

The shapes come from ``--model-config`` (a ``config.json``) or, by default, Qwen2.5-0.5B-Instruct's
published ``config.json`` values below. Each part is :func:`evolora.model.memory.memory_estimate`;
rows and tokens come from the run config: the larger decode batch (``generation_batch_size``,
``eval.batch_size``) over ``--prompt-tokens`` plus the longest generation, and one
``learner.micro_batch`` of prompt plus the longest completion. The prompt length is an
assumption (a gsm teacher prompt with two examples is ~400-500 tokens); pass the one you measure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evolora.config import Config, load_config  # noqa: E402
from evolora.generation.engine import BATCH_SIZE  # noqa: E402
from evolora.model.memory import ModelShapes, RunShape, memory_estimate  # noqa: E402

QWEN25_05B = {
    "model_type": "qwen2",
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}
"""Qwen2.5-0.5B-Instruct's ``config.json`` shapes (494 M parameters)."""

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}
"""Bytes per base weight; ``auto`` is bfloat16 on a GPU that supports it."""


def run_shape(config: Config, prompt_tokens: int) -> RunShape:
    """The rows and tokens of ``config`` that memory depends on, for prompts of ``prompt_tokens``."""
    selfplay, params = config.selfplay, config.task.params
    teacher = selfplay.roles["teacher"].max_new_tokens
    if params.get("structured"):  # problem, forced code fence, program (and a forced print): the segments' limits
        teacher = params.get("problem_tokens", teacher) + params.get("program_tokens", teacher) + 32
    generated = max(teacher, selfplay.roles["student"].max_new_tokens, config.eval.max_new_tokens)
    completion = max(teacher, selfplay.roles["student"].max_new_tokens)
    targets = None if isinstance(config.lora.target_modules, str) else config.lora.target_modules
    slots = sum(config.role_sizes.values()) + selfplay.matchmaking.hall_of_fame
    return RunShape(
        dtype_bytes=DTYPE_BYTES[config.model.dtype],
        rank=config.lora.rank,
        targets=targets,
        slots=slots,
        members=sum(config.role_sizes.values()),
        rollout_rows=max(
            selfplay.generation_batch_size or BATCH_SIZE["cuda"], config.eval.batch_size or BATCH_SIZE["cuda"]
        ),
        rollout_tokens=prompt_tokens + generated,
        train_rows=config.learner.micro_batch,
        train_tokens=prompt_tokens + completion,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "config", nargs="?", default=str(Path(__file__).resolve().parent.parent / "tasks" / "gsm-gpu.yaml")
    )
    parser.add_argument("--model-config", type=Path, help="a config.json (default: Qwen2.5-0.5B-Instruct's shapes)")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    args = parser.parse_args()
    config = load_config(args.config)
    shapes = ModelShapes.from_config(json.loads(args.model_config.read_text()) if args.model_config else QWEN25_05B)
    run = run_shape(config, args.prompt_tokens)
    parts = memory_estimate(shapes, run)
    print(
        f"{args.config}: {shapes.parameters() / 1e6:.0f} M parameters, {run.dtype_bytes} bytes each; "
        f"rank {run.rank}, {run.slots} slots, {run.members} optimizers; decode {run.rollout_rows} rows x "
        f"{run.rollout_tokens} tokens; train {run.train_rows} rows x {run.train_tokens} tokens"
    )
    print("| part | GB |\n|---|---|")
    for name, value in parts.items():
        print(f"| {name} | {value / 1e9:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
