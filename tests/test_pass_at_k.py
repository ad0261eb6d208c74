"""benchmarks/pass_at_k.py: the unbiased pass@k estimator, and a run's greedy column equals its own evaluation."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
from run_helpers import benchmark_module, finished_arith_run

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "pass_at_k.py"


def _module():
    return benchmark_module("pass_at_k")


def test_pass_at_k_estimator_values():
    pass_at_k = _module().pass_at_k
    assert pass_at_k(8, 0, 4) == 0.0 and pass_at_k(8, 8, 1) == 1.0
    assert pass_at_k(8, 2, 1) == pytest.approx(2 / 8)  # pass@1 is the sampled accuracy
    assert pass_at_k(8, 1, 4) == pytest.approx(1 - math.comb(7, 4) / math.comb(8, 4))  # = 0.5
    assert pass_at_k(8, 5, 4) == 1.0  # fewer than k wrong samples: every k-subset holds a correct one
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(4, 5, 1)


@pytest.mark.slow
def test_greedy_column_matches_the_runs_own_evaluation(tiny_config, tmp_path, single_thread):
    from evolora.model import load_base

    run, held_out = finished_arith_run(tiny_config, tmp_path)
    config = run.config
    member = next(name for name in held_out if name != "base")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--members", member, "--samples", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name in (member, "base"):
        line = re.search(rf"^{name}\s+(\d\.\d+)\s+(\d\.\d+)\s+(\d\.\d+)\s+(\d\.\d+)$", done.stdout, re.M)
        assert line, done.stdout
        assert float(line[1]) == pytest.approx(held_out[name]["accuracy"], abs=5e-4)
        assert float(line[3]) == pytest.approx(float(line[2]), abs=5e-4)  # pass@1 = sampled mean
        assert float(line[4]) >= float(line[3]) - 1e-9  # pass@2 >= pass@1
    assert "per cell" in done.stdout
    from evolora.evaluation.rerun import UNUSED_SLOT, load_members

    fresh, tokenizer = load_base("tiny-random")  # the run's model holds its own bank's layers
    _, task, tokenizer, bank = load_members(tmp_path, [], model=fresh, tokenizer=tokenizer)  # the base only
    assert bank.slots == [UNUSED_SLOT]
    items = task.held_out(config.eval.limit, None)  # the grid ignores the rng
    base = _module()._correct(
        task,
        tokenizer,
        bank,
        items,
        ["__base__"],
        samples=1,
        temperature=0.5,
        tokens=config.eval.max_new_tokens,
        seed=0,
    )["__base__"][0]
    assert sum(base) == held_out["base"]["correct"]  # a base-only bank answers as the run's evaluation did
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--set", "eval.max_new_tokens=0"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert bad.returncode != 0 and "eval.max_new_tokens" in bad.stderr  # refused before the model loads
    summary = json.loads((tmp_path / "final" / "summary.json").read_text())
    assert summary["held_out"] == held_out  # the benchmark only reads the run
