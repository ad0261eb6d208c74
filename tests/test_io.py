"""Crash-safe writes: atomic replace, nothing half-written, the usual file mode, JSON lines."""

from __future__ import annotations

import os
import stat

import pytest

from evolora.io import append_jsonl, atomic_path, read_jsonl, write_json_atomic, write_text_atomic


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "a.txt"
    write_text_atomic(target, "one")
    write_text_atomic(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "a.json"
    write_json_atomic(target, {"x": 1})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash mid-write")
    assert target.read_text() == '{\n  "x": 1\n}'
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_atomic_files_and_directories_get_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "f.txt", "x")
        with atomic_path(tmp_path / "d", directory=True) as tmp:
            (tmp / "inner.txt").write_text("y")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "f.txt").stat().st_mode) == 0o644  # not mkstemp's 0600
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755
    assert (tmp_path / "d" / "inner.txt").read_text() == "y"


def test_jsonl_skips_a_partial_last_line_and_a_damaged_middle_line(tmp_path):
    path = tmp_path / "m.jsonl"
    for step in range(3):
        append_jsonl(path, {"step": step})
    with open(path, "a") as handle:
        handle.write('{"step": 3, "trunc')  # a crash mid-append
    assert read_jsonl(path) == [{"step": 0}, {"step": 1}, {"step": 2}]
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "#garbage#", *lines[1:3]]) + "\n")
    assert read_jsonl(path) == [{"step": 0}, {"step": 1}, {"step": 2}]  # not cut at the damaged line
    assert read_jsonl(tmp_path / "missing.jsonl") == []
