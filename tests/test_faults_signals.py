"""Fault class "signals": ``evolora evaluate`` killed (SIGTERM or SIGKILL) while it evaluates leaves
the run's summary, answers and adapters exactly as they were: its records are replaced
atomically, once, at the end. Kills during a run's steps and checkpoints are tested in
tests/test_crash_resume.py and tests/test_chaos.py (random kills and a damaged checkpoint), and
SIGKILL of a Ray worker in tests/test_ray.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from run_helpers import finished_cli_run, tree_digest

CLI = [sys.executable, "-c", "from evolora.cli import app; app()"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, single_thread):
    return finished_cli_run(tmp_path_factory.mktemp("signals") / "run")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_evaluate_killed_midway_keeps_every_record(finished_run, sig):
    before = tree_digest(finished_run)
    proc = subprocess.Popen(
        [*CLI, "evaluate", str(finished_run), "--samples", "64", "--limit", "8"],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen = []
    for line in proc.stdout:  # the command names the adapters it reads before it loads a model
        seen.append(line)
        if "reading the adapters of step 2" in line:
            proc.send_signal(sig)
            break
    proc.wait(timeout=120)
    assert proc.returncode == -sig, "".join(seen)[-800:]
    assert tree_digest(finished_run) == before
