"""Each benchmark script runs end to end on the tiny random model and prints its ratio line.

These are smoke tests, not timings: sizes are tiny and the numbers are not checked.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest
from run_helpers import BENCHMARKS, run_benchmark

pytestmark = pytest.mark.slow  # over ~5 s each: CI runs them, `-m "not slow"` skips them


CASES = {
    "checkpoint_threshold": (
        ["--prompt-tokens", "4", "--completion-tokens", "4", "--samples", "4", "--repeats", "1"],
        r"ratio checkpointing off/on update time: \d+\.\d+x",
    ),
    "packing": (
        ["--groups", "1", "--student-tokens", "4", "--repeats", "1"],
        r"ratio packed/rows update time: \d+\.\d+x",
    ),
    "population_overhead": (
        ["--tokens", "6", "--samples", "2", "--proposals", "1", "--steps", "1"],
        r"ratio population/single seconds per adapter-sample: \d+\.\d+x",
    ),
    "memory": (
        ["--adapters", "1", "2", "--batch", "2", "--tokens", "4"],
        r"ratio increment per adapter / \(factors \+ grads \+ Adam\): -?\d+\.\d+x",
    ),
    "rollout_limit": (
        ["--quick", "--profile"],  # --quick's 2 decode steps are noise: the profile's sign is not checked
        r"gsm run, 2 steps: peak RSS \d+ MB.*\nratio evolora routed, 8 adapters decode / limit: "
        r"\d+\.\d+(.|\n)*one decode step: -?\d+\.\d+ ms wall under the profiler, -?\d+\.\d+ ms in operators",
    ),
    "eval_budget": (
        ["--limit", "3", "--max-new-tokens", "4", "--budgets", "8", "64"],
        r"ratio CPU time 64/8 positions: \d+\.\d+x",
    ),
    "graph_decode": (["--quick"], r"ratio graph/eager tok/s: \d+\.\d+x"),
    "graph_ops": (
        ["--quick"],
        r"ratio after/before launching operations per layer: float32 \d+\.\d+, bfloat16 \d+\.\d+",
    ),
    "rl_step": (["--tokens", "6", "--steps", "1"], r"ratio evolora/TRL update time per sample: \d+\.\d+x"),
    "shared_prefix": (
        [
            "--prompt-tokens",
            "5",
            "--teacher-prompt-tokens",
            "6",
            "--completion-tokens",
            "4",
            "--groups",
            "1",
            "--group-size",
            "4",
            "--teacher-samples",
            "2",
            "--repeats",
            "1",
        ],
        r"ratio shared/padded update time: \d+\.\d+x",
    ),
    "dtype_step": (
        ["--tokens", "4", "--samples", "2", "--proposals", "1", "--steps", "1"],
        r"ratio bf16/fp32 step time: \d+\.\d+",
    ),
    "logprob_mismatch": (
        ["--tokens", "6", "--batch", "4", "--adapters", "2"],
        r"bfloat16 +inference - update +\d\.\d+e[-+]\d+ / ",
    ),
    "contention": (
        ["--workload", "decode", "--repeats", "1", "--hog", "1", "--rows", "2", "--new-tokens", "2"],
        r"ratio hog/quiet at auto: \d+\.\d+x(.|\n)*LM head(: this CPU| fp32, 1 thread, M=2: .* ratio \d+\.\d+x)",
    ),
    "sampling": (
        [
            "--task",
            "arith",
            "--temperatures",
            "0.5",
            "1.0",
            "--proposals",
            "2",
            "--problems",
            "2",
            "--n",
            "2",
            "--teacher-tokens",
            "4",
            "--student-tokens",
            "4",
        ],
        r"ratio T=0\.50 vs T=1\.00: \{'validity'",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_benchmark_prints_ratio(name):
    if name == "rl_step" and (importlib.util.find_spec("trl") is None or importlib.util.find_spec("datasets") is None):
        pytest.skip("TRL is a dev-only dependency: pip install --no-deps trl; pip install datasets")
    args, pattern = CASES[name]
    stdout = run_benchmark(f"{name}.py", "--model", "tiny-random", "--threads", "1", *args)
    assert re.search(pattern, stdout), stdout[-3000:]


def test_prepack_gemm_prints_its_ratios():
    """SmolLM2's linear shapes (no model loads), one weight per shape."""
    import torch

    from evolora.model.prepack import prepack_supported

    if not prepack_supported(torch.float32):
        pytest.skip("this CPU/torch cannot pack float32 weights")
    stdout = run_benchmark("prepack_gemm.py", "--layers", "1")
    assert re.search(r"ratio packed/F.linear: q/o \d+\.\d+, k/v \d+\.\d+, gate/up \d+\.\d+, down \d+\.\d+", stdout)


def test_lora_layout_prints_its_ratio():
    """SmolLM2's group shapes (no model loads), one shape."""
    stdout = run_benchmark("lora_layout.py", "--quick")
    assert re.search(r"ratio dense/gathered, q/k/v, 8 rows × 1 token: \d+\.\d+", stdout), stdout


def test_contention_pair_starts_two_runs_and_prints_each_runs_ratio():
    """Whole ``evolora evolve`` processes: one alone, two side by side at ``auto`` and at 1 thread."""
    stdout = run_benchmark(
        "contention.py", "--model", "tiny-random", "--workload", "pair", "--threads", "1", "--repeats", "1"
    )
    for setting in ("auto", "1"):
        assert re.search(
            rf"ratio beside/alone at {setting} \(alone at auto: \d+\.\d+ s\): run 1 \d+\.\d+x, run 2 \d+\.\d+x",
            stdout,
        ), stdout[-3000:]
    assert stdout.count("| pair |") == 4 and stdout.count("| alone |") == 1, stdout[-3000:]


def test_gpu_check_without_a_gpu_says_so_and_exits_cleanly():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: run benchmarks/gpu_check.py itself")
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "gpu_check.py")], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and "torch sees no CUDA device" in done.stdout, done.stderr[-2000:]


def test_gpu_check_runs_its_checks_cpu_against_cpu():
    stdout = run_benchmark("gpu_check.py", "--device", "cpu", "--model", "tiny-random", "--parity", "tiny-random")
    assert re.search(r"parity tiny-random: 6 greedy rows, \d+ tokens equal on cpu and cpu", stdout), stdout
    assert "tasks/gsm.yaml step on cpu (tiny-random)" in stdout and "gpu_check passed" in stdout


def test_gpu_check_speed_part_runs_on_the_cpu_at_tiny_sizes():
    """The graph engine's speed part: parity graph vs eager (tiny Llama and Qwen2), figures printed, no targets."""
    stdout = run_benchmark("gpu_check.py", "--device", "cpu", "--quick", "--skip-gsm", timeout=600)
    for label in ("tiny-random", "Qwen2 tiny"):
        assert f"{label} parity on cpu, fp32: graph and eager tokens equal" in stdout, stdout
        assert re.search(rf"{label} batch 4: step -?\d+\.\d+ ms bare, .*HF generate \d+ tok/s", stdout), stdout
    assert "gpu_check passed (gsm step left out)" in stdout


def test_critic_study_pairs_the_best_critic_with_the_base(tmp_path):
    """Two seeds: best critic − base = +10 and +20 points → mean +15.0; reranking − majority = 0 and +25."""
    import json

    runs = []
    for seed, (critic, rerank) in enumerate(((0.6, 0.25), (0.75, 0.5))):
        judge = {"reviews": 40, "parse_rate": 1.0, "auc": 0.5}
        summary = {
            "seed": seed,
            "critic_eval": {
                "problems": 10,
                "n": 4,
                "judges": {
                    "base": {**judge, "balanced_accuracy": 0.5 + 0.05 * seed},
                    "c0": {**judge, "balanced_accuracy": critic},
                    "c1": {**judge, "balanced_accuracy": 0.4},
                },
                "answerers": {
                    "base": {"majority": 0.0, "best_of_n": {}},
                    "s0": {"majority": 0.25, "best_of_n": {"c0": rerank, "c1": 0.0}},
                },
            },
        }
        run = tmp_path / f"s{seed}"
        (run / "final").mkdir(parents=True)
        (run / "final" / "summary.json").write_text(json.dumps(summary))
        steps = [
            {
                "step": k,
                "critic": {
                    "per_critic": {
                        "c0": {"balanced_accuracy": 0.4 + 0.1 * k, "said_correct": 0.5},
                        "c1": {"balanced_accuracy": None, "said_correct": 1.0},
                    }
                },
            }
            for k in (1, 2, 3)
        ]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in steps))
        runs.append(str(run))
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "critic_study.py"), *runs],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert re.search(r"best critic - base, balanced accuracy .*: \+15\.0 \[", done.stdout), done.stdout
    assert re.search(r"best-of-n by the best critic - majority-of-n .*: \+12\.5 \[", done.stdout), done.stdout
    assert "| 1 | c0 | 75.0 % | 55.0 % | +20.0 |" in done.stdout
    assert "first 1 steps 0.500 (n 1), last 1 0.700 (n 1); near-constant critic-steps 3 of 6" in done.stdout


def test_shared_prefix_attention_agrees_with_full_attention_and_prints_its_ratio():
    """The merged two-part attention equals attention over each row's whole cache (fp32)."""
    stdout = run_benchmark(
        "shared_prefix_attention.py", "--threads", "1", "--prompts", "2", "--samples", "2", "--prefix", "8",
        "--suffix", "4", "--repeats", "1",
    )  # fmt: skip
    difference = float(re.search(r"max \|difference\| (\S+)", stdout).group(1))
    assert difference < 1e-5, stdout
    assert re.search(r"ratio shared/full attention time: \d+\.\d+", stdout), stdout
