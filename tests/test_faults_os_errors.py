"""Fault class "OS errors": ENOSPC, EDQUOT, EFBIG, EACCES, EROFS and EIO on a run's files or on the
caches end in one line (exit 2) with advice that fits that error, and nothing half-written is left.

Each error is injected (an OSError raised where the file is written) into a checkpoint of a tiny
toy run, into ``evolora evaluate``'s atomic writes, and into the converted-model cache folder."""

from __future__ import annotations

import errno
import os

import pytest
from run_helpers import TOY_ARGS, finished_cli_run, tree_digest
from typer.testing import CliRunner

from evolora.checkpoint import checkpoint_problem, latest_checkpoint
from evolora.cli import app

runner = CliRunner()

ADVICE = {
    errno.ENOSPC: ("no space left on the device", "make room"),
    errno.EDQUOT: ("disk quota exceeded", "quota"),
    errno.EFBIG: ("file too large", "ulimit -f"),
    errno.EACCES: ("permission denied", "write access"),
    errno.EROFS: ("read-only", "remount it read-write"),
    errno.EIO: ("input/output error", "check the disk"),
}
"""errno -> (what the line says happened, the advice it must give)."""


def error_lines(output: str) -> list[str]:
    """The lines from ``error:`` to the end of the output (the command's last words)."""
    assert "error:" in output, output
    return output[output.index("error:") :].strip().splitlines()


def check_line(output: str, code: int) -> str:
    """Assert one error line with the right words and advice for ``code``; return it."""
    lines = error_lines(output)
    assert len(lines) == 1 and "Traceback" not in output, output
    what, advice = ADVICE[code]
    assert what in lines[0] and advice in lines[0], lines[0]
    if code != errno.ENOSPC:
        assert "make room" not in lines[0]  # the advice of a full disk fits no other error
    return lines[0]


@pytest.mark.parametrize("code", list(ADVICE), ids=errno.errorcode.get)
def test_an_os_error_during_a_checkpoint_is_one_line_and_keeps_the_last_one(tmp_path, monkeypatch, single_thread, code):
    import evolora.checkpoint as checkpoint

    real, calls = checkpoint._write, []

    def write(path, data):  # the second checkpoint's second file fails
        calls.append(path)
        if len(calls) == 6:
            raise OSError(code, os.strerror(code), str(path))
        real(path, data)

    monkeypatch.setattr(checkpoint, "_write", write)
    out = tmp_path / "run"
    result = runner.invoke(
        app, ["evolve", "tasks/gsm.yaml", "--out", str(out), *TOY_ARGS, "--set", "run.checkpoint_every=1", "--no-eval"]
    )
    assert result.exit_code == 2, result.output
    line = " ".join(check_line(result.output, code).split())
    assert "the checkpoint of step 1 is intact" in line and f"--resume {out}" in "".join(result.output.split("\n"))
    kept = latest_checkpoint(out)
    assert kept.name == "step_000001" and checkpoint_problem(kept) is None
    assert not list((out / "checkpoints").glob(".step_*"))  # the half-written one was removed


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, single_thread):
    return finished_cli_run(tmp_path_factory.mktemp("os-errors") / "run")


@pytest.mark.parametrize("code", [errno.EFBIG, errno.EACCES, errno.EIO], ids=errno.errorcode.get)
def test_an_os_error_during_evaluate_keeps_the_run_as_it_was(finished_run, monkeypatch, code):
    import evolora.io

    def fsync(fd):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(evolora.io.os, "fsync", fsync)
    before = tree_digest(finished_run)
    result = runner.invoke(app, ["evaluate", str(finished_run), "--limit", "1"])
    assert result.exit_code == 2, result.output
    assert "as they were" in " ".join(check_line(result.output, code).split())
    assert tree_digest(finished_run) == before  # no temporary file left either


def test_an_unwritable_cache_folder_is_one_line_naming_it_and_evolora_cache(tmp_path, monkeypatch, single_thread):
    import evolora.model.resolve as model_module

    cache = tmp_path / "cache"
    monkeypatch.setenv("EVOLORA_CACHE", str(cache))

    def convert(gguf_file, destination):  # what mkdir raises in a folder the user cannot write
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(destination.parent))

    monkeypatch.setattr(model_module, "convert_gguf", convert)
    monkeypatch.setattr(model_module, "_gguf_path", lambda key: tmp_path / "x.gguf")
    out = tmp_path / "run"
    args = [a.replace("model.name=tiny-random", "model.name=smollm2") for a in TOY_ARGS]
    result = runner.invoke(app, ["evolve", "tasks/gsm.yaml", "--out", str(out), *args, "--no-eval"])
    assert result.exit_code == 2, result.output
    line = "".join(check_line(result.output, errno.EACCES).split())
    assert str(cache / "models").replace(" ", "") in line and "$EVOLORA_CACHE" in line
    assert "nothinghalf-writtenisleft" in line
