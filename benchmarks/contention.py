"""The main job under CPU contention: idle vs beside a 2-process CPU hog, or beside a second
evolora run, at the thread policy's choice (``model.num_threads: auto``) and at fixed counts; and
the prepacked LM-head GEMM.

    python benchmarks/contention.py                      # one default arith step per cell
    python benchmarks/contention.py --workload decode    # a fixed greedy decode per cell (faster)
    python benchmarks/contention.py --model tiny-random --workload decode --repeats 1
    python benchmarks/contention.py --workload pair --threads 2 --repeats 1   # beside a second run

Every cell runs in this one process, interleaved (quiet, hog) × (auto, each of ``--threads``),
``--repeats`` times; the hog is ``--hog`` busy-loop processes started for its cells and stopped
after them. Prints each cell's median seconds and the ratios, then the LM head (V × d of the
model) at 1 thread, M = ``--rows``: ``F.linear`` vs the oneDNN-packed weight
(:mod:`evolora.model.prepack`). Record ``lscpu`` and ``uptime`` with the figures: a "quiet"
cell is only as quiet as the machine.

``--workload pair`` runs whole ``evolora evolve`` processes instead (``_pair.py``), interleaved
per repeat: one run alone and two runs of the same config started at the same moment, at
``auto`` (each run's own policy) and at each of ``--threads`` (alone too for the settings in
``--alone``); each run's step time beside the other as a ratio of the step alone.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from _timing import median_seconds  # noqa: E402

HOG = "while True: pass"


@contextmanager
def hog(processes: int):
    """``processes`` Python busy loops running for the duration of the block (0: none), in a process session
    of their own: where the kernel groups CPU time by process session (``sched_autogroup``), they compete as
    a job started from another terminal does, not inside this process's own share."""
    children = [subprocess.Popen([sys.executable, "-c", HOG], start_new_session=True) for _ in range(processes)]
    try:
        time.sleep(0.5 if children else 0)  # let them reach the run queue
        yield
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait()


def decode_workload(model_name: str, rows: int, new_tokens: int):
    """A fixed greedy decode: ``rows`` prompts, ``new_tokens`` new tokens each (HF ``generate``)."""
    from evolora.model import load_base

    model, tokenizer = load_base(model_name, dtype="float32")
    prompts = [f"Question {i}: what is {i} + {2 * i}? Think step by step." for i in range(rows)]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)

    def run() -> None:
        with torch.no_grad():
            model.generate(**batch, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens)

    return lambda: run


def step_workload(config_path: str, overrides: list[str]):
    """Step 1 of a fresh run of ``config_path`` (same seed each time), built untimed; threads are
    the cell's (``model.num_threads`` null)."""
    from evolora.config import load_config
    from evolora.run import Run

    config = load_config(config_path, overrides=[*overrides, "eval.enabled=false", "model.num_threads=null"])

    def prepare():
        out = tempfile.mkdtemp(prefix="contention-")
        atexit.register(shutil.rmtree, out, ignore_errors=True)
        return Run(config, out).run_step

    return prepare


def policy_threads() -> int:
    """What ``model.num_threads: auto`` picks now."""
    from evolora.model.threads import ThreadPolicy

    return ThreadPolicy("auto").choose()


def contention(prepare, threads: list[int], hog_processes: int, repeats: int) -> dict:
    """{(hogged, label): [(seconds, label), ...]} over interleaved cells (``prepare()`` untimed,
    then the callable it returns timed); label ``auto=N`` or ``N``."""
    times: dict = {}
    for _ in range(repeats):
        for hogged in (False, True):
            with hog(hog_processes if hogged else 0):
                chosen = policy_threads()
                for label, count in [(f"auto={chosen}", chosen)] + [(str(t), t) for t in threads]:
                    run = prepare()
                    torch.set_num_threads(count)
                    began = time.perf_counter()
                    run()
                    seconds = time.perf_counter() - began
                    times.setdefault((hogged, label.split("=")[0]), []).append((seconds, label))
                    print(f"  {'hog' if hogged else 'quiet'} {label}: {seconds:.2f} s", flush=True)
    return times


def head_gemm(model_name: str, rows: int, repeats: int) -> tuple[float, float, float]:
    """(F.linear ms, prepacked ms, max |difference|) of the fp32 LM head at 1 thread, M = ``rows``."""
    from evolora.model import load_base
    from evolora.model.prepack import pack_weight, packed_linear

    model, _ = load_base(model_name, dtype="float32")
    weight = model.get_output_embeddings().weight.detach()
    x = torch.randn(rows, weight.shape[1], generator=torch.Generator().manual_seed(0))
    packed = pack_weight(weight)
    torch.set_num_threads(1)
    plain = median_seconds(lambda: F.linear(x, weight), repeats)
    fast = median_seconds(lambda: packed_linear(x, packed, weight.shape[0]), repeats)
    gap = (F.linear(x, weight) - packed_linear(x, packed, weight.shape[0])).abs().max().item()
    return plain * 1e3, fast * 1e3, gap


def pair_contention(config: str, overrides: list[str], settings: list[str], alone: list[str], args) -> None:
    """Print the pair cells (``_pair.run_together``) and each run's step-1 ratio beside/alone; a
    fixed setting without an alone cell is compared with ``auto`` alone."""
    from _pair import run_together

    cells: dict = {}
    for _ in range(args.repeats):
        for setting in settings:
            for count in (1, 2) if setting in alone else (2,):
                runs = run_together(count, config, setting, args.steps, overrides)
                cells.setdefault((count, setting), []).append(runs)
                for i, run in enumerate(runs):
                    steps = ", ".join(f"{s:.2f}" for s in run["seconds"])
                    print(f"  {'alone' if count == 1 else 'pair'} {setting} run {i + 1}: {steps} s; {run['notes']}")
    print("| cell | model.num_threads | run | threads in notes | step seconds |")
    print("|---|---|---|---|---|")
    for (count, setting), repeats in cells.items():
        for runs in repeats:
            for i, run in enumerate(runs):
                steps = ", ".join(f"{s:.2f}" for s in run["seconds"])
                print(f"| {'alone' if count == 1 else 'pair'} | {setting} | {i + 1} | {run['threads']} | {steps} |")
    for setting in settings:
        reference = setting if setting in alone else "auto"
        base = statistics.median(runs[0]["seconds"][0] for runs in cells[1, reference])
        ratios = [[run["seconds"][0] / base for run in runs] for runs in cells[2, setting]]
        shown = "; ".join(", ".join(f"run {i + 1} {r:.2f}x" for i, r in enumerate(rs)) for rs in ratios)
        print(f"ratio beside/alone at {setting} (alone at {reference}: {base:.2f} s): {shown}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=["step", "decode", "pair"], default="step")
    parser.add_argument("--config", default="tasks/arith.yaml", help="the step's config (--workload step)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="a config override of the step")
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--threads", default="1,2", help="fixed thread counts compared with auto ('': auto only)")
    parser.add_argument("--hog", type=int, default=2, help="busy-loop processes of the hogged cells")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rows", type=int, default=8, help="decode rows, and M of the LM-head GEMM")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--no-gemm", action="store_true", help="skip the LM-head GEMM comparison")
    parser.add_argument("--alone", default="auto", help="settings also run alone (--workload pair; others: auto's)")
    parser.add_argument("--steps", type=int, default=1, help="steps of each run (--workload pair; step 1 is compared)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the hog on the way out
    threads = [int(t) for t in args.threads.split(",") if t]
    if args.workload == "pair":
        alone = sorted({"auto", *(a for a in args.alone.split(",") if a)})
        print(f"workload pair; {os.cpu_count()} cores; load before {open('/proc/loadavg').read().split()[:3]}")
        settings = ["auto", *map(str, threads)]
        pair_contention(args.config, [f"model.name={args.model}", *args.overrides], settings, alone, args)
        print(f"load after {open('/proc/loadavg').read().split()[:3]}")
        return
    if args.workload == "decode":
        prepare = decode_workload(args.model, args.rows, args.new_tokens)
    else:
        prepare = step_workload(args.config, [f"model.name={args.model}", *args.overrides])
    print(f"workload {args.workload}; {os.cpu_count()} cores; load before {open('/proc/loadavg').read().split()[:3]}")
    prepare()()  # warm-up (not timed)
    times = contention(prepare, threads, args.hog, args.repeats)
    medians = {key: statistics.median(s for s, _ in values) for key, values in times.items()}
    print("| cell | threads | seconds (median) | runs |")
    print("|---|---|---|---|")
    for (hogged, label), values in times.items():
        print(
            f"| {'hog' if hogged else 'quiet'} | {label} | {medians[hogged, label]:.2f} | "
            f"{', '.join(f'{s:.2f} ({t})' for s, t in values)} |"
        )
    for label in ["auto", *map(str, threads)]:
        print(f"ratio hog/quiet at {label}: {medians[True, label] / medians[False, label]:.2f}x")
    for label in map(str, threads):
        print(f"ratio hog at {label} / quiet at auto: {medians[True, label] / medians[False, 'auto']:.2f}x")
    print(f"load after {open('/proc/loadavg').read().split()[:3]}")
    from evolora.model.prepack import prepack_supported

    if not args.no_gemm and not prepack_supported(torch.float32):
        print("LM head: this CPU/torch cannot pack an fp32 weight (model.prepack falls back to F.linear)")
    elif not args.no_gemm:
        plain, fast, gap = head_gemm(args.model, args.rows, 20)
        print(
            f"LM head fp32, 1 thread, M={args.rows}: F.linear {plain:.1f} ms, prepacked {fast:.1f} ms; "
            f"ratio {plain / fast:.2f}x; max |diff| {gap:.1e}"
        )


if __name__ == "__main__":
    main()
