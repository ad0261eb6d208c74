"""A few population steps on CUDA with a model built from a config: tokens/s and seconds per phase.

No weights are fetched: the base is a random Llama of SmolLM2-135M's size (hidden 576, 30
layers, 49152-token vocabulary, tied embeddings; :func:`evolora.model.tiny.tiny_model`) with
the character tokenizer, saved to a temporary directory that the Ray worker loads as
``model.name``. The run is 4 teachers + 4 students (PopuLoRA arXiv 2605.16727 §2) on
``run.backend=ray`` with one worker per GPU, ``model.device=cuda`` and bfloat16 weights.
Finishes in well under 5 minutes on one GPU; without a GPU it says so and exits 0.

    python benchmarks/gpu_check.py                       # on a GPU machine (needs evolora[ray])
    python benchmarks/gpu_check.py --device cpu --hidden 64 --layers 2 --vocab 128 --steps 2   # the path on CPU
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

PHASES = ("rollout_teacher", "verify", "rollout_student", "train", "evolve", "driver_overhead", "total")


def build_model(directory: Path, *, hidden: int, layers: int, vocab: int) -> None:
    """Save a random Llama of the given size and the character tokenizer into ``directory``."""
    from evolora.model.tiny import tiny_model

    model, tokenizer = tiny_model(seed=0, vocab=vocab, hidden=hidden, layers=layers)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--hidden", type=int, default=576)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device here; nothing to check (run it on a GPU machine, "
              "or pass --device cpu to exercise the same path on the CPU)")
        return 0
    try:
        import ray
    except ImportError:
        print("gpu_check runs the population on Ray workers: pip install 'evolora[ray]'")
        return 1
    from evolora.config import config_from_dict
    from evolora.run import Run
    from evolora.tasks.toy import ToyTask

    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        build_model(Path(root) / "base", hidden=args.hidden, layers=args.layers, vocab=args.vocab)
        ray.init(num_cpus=2 if not gpus else None, include_dashboard=False, log_to_driver=False)
        config = config_from_dict({
            "model": {"name": str(Path(root) / "base"), "device": args.device,
                      "dtype": "bfloat16" if args.device == "cuda" else "float32"},
            "population": {"teachers": 4, "students": 4}, "task": {"name": "toy", "params": {"max_problem_chars": 200}},
            "run": {"steps": args.steps, "backend": "ray", "workers": max(1, min(gpus, 8))},
            "selfplay": {"proposals_per_teacher": 2, "samples_per_problem": 4, "teacher_max_new_tokens": args.tokens,
                         "student_max_new_tokens": args.tokens},
            "evolution": {"every": 2}, "eval": {"enabled": False}})
        run = Run(config, Path(root) / "run", task=ToyTask(max_problem_chars=200))
        started = time.perf_counter() - began
        print(f"gpu_check: {config.run.workers} worker(s) on {args.device} ({gpus} GPUs), base "
              f"{args.hidden}x{args.layers} vocab {args.vocab}, {config.model.dtype}; start-up {started:.1f} s")
        print("| step | tokens | tokens/s | " + " | ".join(PHASES) + " |")
        print("|---" * (len(PHASES) + 3) + "|")
        for _ in range(args.steps):
            record, _ = run.run_step()
            seconds = record["seconds"]
            print(f"| {record['step']} | {record['tokens']} | {record['tokens_per_second']:.0f} | "
                  + " | ".join(f"{seconds.get(p, 0.0):.3f}" for p in PHASES) + " |")
        run.close()
        ray.shutdown()
    print(f"done in {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
