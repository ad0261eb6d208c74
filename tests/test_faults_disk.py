"""Fault class "disk": a full or read-only disk while ``evolora evaluate`` or ``evolora export``
writes exits 2 with one line, and every file already written stays as it was (writes are atomic:
a temporary file, fsync, rename). A full disk during a run's checkpoint is tested in
tests/test_run_dir.py (test_a_full_or_read_only_disk_exits_2_and_keeps_the_last_checkpoint).
"""

from __future__ import annotations

import errno
import os

import pytest
from run_helpers import finished_cli_run, tree_digest
from typer.testing import CliRunner

from evolora.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, single_thread):
    return finished_cli_run(tmp_path_factory.mktemp("disk") / "run")


@pytest.fixture
def full_disk(monkeypatch):
    """Every fsync fails as on a full disk (the last step before an atomic rename)."""
    import evolora.io

    def fsync(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(evolora.io.os, "fsync", fsync)


def test_a_full_disk_during_evaluate_keeps_the_summary_and_answers(finished_run, full_disk):
    before = tree_digest(finished_run)
    result = runner.invoke(app, ["evaluate", str(finished_run), "--limit", "1"])
    flat = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "no space left on the device" in flat and "as they were" in flat and "Traceback" not in flat
    assert tree_digest(finished_run) == before  # no temporary file left either


def test_a_full_disk_during_export_leaves_no_partial_export(finished_run, full_disk, tmp_path):
    before = tree_digest(finished_run)
    result = runner.invoke(app, ["export", str(finished_run), "--no-merge", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2, result.output
    assert "no space left on the device" in " ".join(result.output.split())
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob(".x.*"))
    assert tree_digest(finished_run) == before
