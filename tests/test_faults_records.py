"""Fault class "records": damaged logs and summaries (a torn last line, garbage bytes, a line that
is JSON but not a record, a torn ``final/summary.json``). Readers skip what they cannot use and
never rewrite it; commands that need a record refuse with one line naming the file and the fix.
Resume's repair of the logs (torn, duplicated, corrupt middle lines) is tested in
tests/test_run_dir.py, and killed runs in tests/test_crash_resume.py and tests/test_chaos.py.
"""

from __future__ import annotations

import shutil

import pytest
from run_helpers import finished_cli_run, tree_digest
from typer.testing import CliRunner

from evolora.cli import app
from evolora.io import read_jsonl

runner = CliRunner()
DAMAGE = b'\xff\xfe\x00garbage\n42\n[1, 2]\nnull\n{"step": 9, "torn'


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, single_thread):
    return finished_cli_run(tmp_path_factory.mktemp("records") / "run")


@pytest.fixture
def damaged_run(finished_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    for name in ("metrics.jsonl", "matches.jsonl"):
        with open(run / name, "ab") as handle:
            handle.write(DAMAGE)
    return run


def test_read_jsonl_keeps_every_intact_record_and_only_records(damaged_run, finished_run):
    for name in ("metrics.jsonl", "matches.jsonl"):
        assert read_jsonl(damaged_run / name) == read_jsonl(finished_run / name)
        assert all(isinstance(record, dict) for record in read_jsonl(damaged_run / name))


def test_report_reads_damaged_logs_and_leaves_them_as_they_are(damaged_run, tmp_path):
    before = tree_digest(damaged_run)
    result = runner.invoke(app, ["report", str(damaged_run), "--out", str(tmp_path / "report")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report" / "index.html").is_file() or list((tmp_path / "report").glob("*.html"))
    assert tree_digest(damaged_run) == before


@pytest.mark.parametrize("command", [["evaluate"], ["export", "--no-merge"]])
def test_a_torn_summary_is_refused_with_the_fix_and_kept(finished_run, tmp_path, command):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    torn = (run / "final" / "summary.json").read_bytes()[:40]
    (run / "final" / "summary.json").write_bytes(torn)
    before = tree_digest(run)
    result = runner.invoke(app, [command[0], str(run), *command[1:]])
    flat = " ".join(result.output.split())
    assert result.exit_code == 2 and "summary.json is not valid JSON" in flat and "--resume" in flat, flat
    assert tree_digest(run) == before
