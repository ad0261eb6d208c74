"""Results on stdout outlive their reader: a closed pipe (``| head``) neither stops a run nor loses it."""

from __future__ import annotations

import os
import subprocess
import sys

from run_helpers import TOY_ARGS

from evolora.cli.pipe import ResultStream


def test_a_closed_pipe_is_noted_once_and_later_writes_go_nowhere():
    read, write = os.pipe()
    os.close(read)  # the reader has gone
    notes = []
    with os.fdopen(write, "w", buffering=1) as pipe:
        stream = ResultStream(pipe, say=notes.append)
        assert stream.write("first line\n") == len("first line\n")
        stream.write("second line\n")
        stream.flush()
    assert len(notes) == 1 and "| head" in notes[0]


def test_a_run_whose_stdout_reader_has_gone_finishes_and_keeps_its_results(tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "evolora", "evolve", "tasks/gsm.yaml", "--out", str(out), *TOY_ARGS, "--no-eval"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    process.stdout.close()  # as `| head` does once it has its lines
    _, error = process.communicate(timeout=300)
    assert process.returncode == 0, error[-2000:]
    assert "the reader of stdout has gone" in error and "done in" in error
    assert (out / "final" / "summary.json").is_file()
