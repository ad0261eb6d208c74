"""``model.num_threads: auto``: the rule, the runs beside a run, the step callback and the config."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import pytest
import torch

from evolora.model.threads import ThreadPolicy, auto_threads, other_runnable, runs_beside, usable_cores


@pytest.fixture(autouse=True)
def _keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize(
    ("cores", "others", "beside", "threads"),
    [
        (2, 0.0, 0, 2),
        (2, 0.4, 0, 2),
        (2, 0.6, 0, 1),
        (2, 1.0, 0, 1),
        (2, 5.0, 0, 1),
        (8, 3.0, 0, 5),
        (8, 0.0, 1, 4),
        (8, 0.0, 3, 2),
        (2, 0.0, 1, 1),
        (2, 0.0, 5, 1),
        (1, 0.0, 0, 1),
    ],
)
def test_the_rule(cores, others, beside, threads):
    assert auto_threads(cores, others, beside) == threads


@pytest.mark.parametrize("bad", [(0, 0.0, 0), (2, -1.0, 0), (2, 0.0, -1)])
def test_the_rule_refuses_impossible_counts(bad):
    with pytest.raises(ValueError, match="expected"):
        auto_threads(*bad)


def test_the_live_probe_reads_this_machine():
    cores = usable_cores()
    assert 1 <= cores <= (os.cpu_count() or 1)
    assert 0.0 <= other_runnable(samples=3, gap=0.0) < 10_000


def test_auto_says_one_line_when_busy_and_when_cores_free_up():
    readings = iter([(2, 3.0, 0), (2, 3.0, 0), (2, 0.0, 0), (2, 0.0, 0)])
    lines = []
    policy = ThreadPolicy("auto", say=lines.append, probe=lambda: next(readings))
    assert policy.apply() == 1 and torch.get_num_threads() == 1
    policy(None, {}, [])  # still busy: same count, no new line
    policy(None, {}, [])  # freed
    assert torch.get_num_threads() == 2 and policy.threads == 2
    policy(None, {}, [])
    assert len(lines) == 2, lines
    assert lines[0].startswith("busy machine: 3 runnable threads of other processes on 2 cores; torch uses 1 thread")
    assert lines[1].startswith("cores freed") and "2 threads" in lines[1]


def test_a_quiet_machine_is_not_reported():
    lines = []
    assert ThreadPolicy("auto", say=lines.append, probe=lambda: (2, 0.0, 0)).apply() == 2
    assert lines == []


@pytest.mark.parametrize(("setting", "expected"), [(1, 1), (3, 3), (None, None)])
def test_an_int_or_none_is_used_as_given_and_never_probed(setting, expected):
    def probe():
        raise AssertionError("probed")

    policy = ThreadPolicy(setting, probe=probe)
    before = torch.get_num_threads()
    assert policy.apply() == expected
    policy(None, {}, [])
    assert torch.get_num_threads() == (before if expected is None else expected)


@pytest.mark.parametrize("bad", [0, -2, True, "fast", 1.5])
def test_bad_settings_are_refused(bad):
    with pytest.raises(ValueError, match="model.num_threads"):
        ThreadPolicy(bad)


def _hold_flock(path) -> subprocess.Popen:
    """A separate live process holding an exclusive ``flock`` on ``path`` until terminated."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; h = open(sys.argv[1], 'a+'); "
            "fcntl.flock(h.fileno(), fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
            str(path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_runs_anywhere_on_the_machine_count_not_only_sibling_directories(tmp_path):
    """Run directories locked by other live processes count wherever they are (a sibling, and one
    in an unrelated tree); this process's own lock, an unlocked ``.lock`` and another file's
    ``flock`` do not."""
    mine, sibling, elsewhere = tmp_path / "a" / "run", tmp_path / "a" / "other", tmp_path / "b" / "c" / "run"
    for folder in (mine, sibling, elsewhere, tmp_path / "old"):
        folder.mkdir(parents=True)
        (folder / ".lock").write_text("")
    before = runs_beside()  # runs of other jobs on this machine, if any
    held = open(mine / ".lock", "a+")  # this process's own lock
    fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    holders = [_hold_flock(tmp_path / "a" / "not-a-run.lck")]
    try:
        assert runs_beside() == before
        holders.append(_hold_flock(elsewhere / ".lock"))
        assert runs_beside() == before + 1
        holders.append(_hold_flock(sibling / ".lock"))
        assert runs_beside() == before + 2
        policy = ThreadPolicy("auto", probe=lambda: (2, 0.0, runs_beside() - before))
        assert policy.apply() == 1
    finally:
        for holder in holders:
            holder.terminate()
            holder.wait()
        held.close()
    assert runs_beside() == before


def test_two_runs_started_at_once_on_idle_cores_take_one_thread_each_and_say_so():
    """Both hold their locks before their models load, so at the first check each sees the other
    (no runnable threads of it yet): one thread each on 2 cores, and one line."""
    lines = []
    assert ThreadPolicy("auto", say=lines.append, probe=lambda: (2, 0.0, 1)).apply() == 1
    assert lines == [
        "shared machine: 0 runnable threads of other processes, 1 evolora run beside this one on 2 cores; "
        "torch uses 1 thread (model.num_threads: auto)"
    ]


def test_config_takes_auto_ints_and_null_and_refuses_the_rest():
    from evolora.config import ConfigError, load_config

    assert load_config("tasks/arith.yaml").model.num_threads == "auto"
    for value, expected in (("2", 2), ("2.0", 2), ("auto", "auto"), ("null", None)):
        assert load_config("tasks/arith.yaml", [f"model.num_threads={value}"]).model.num_threads == expected
    for value in ("0", "true", "fast", "1.5"):
        with pytest.raises(ConfigError, match="model.num_threads: expected an int >= 1, auto or null"):
            load_config("tasks/arith.yaml", [f"model.num_threads={value}"])


def test_load_base_applies_auto_and_ints():
    from evolora.model import load_base

    load_base("tiny-random", num_threads=1)
    assert torch.get_num_threads() == 1
    load_base("tiny-random", num_threads="auto")
    assert 1 <= torch.get_num_threads() <= usable_cores()
    with pytest.raises(ValueError, match="num_threads must be >= 1"):
        load_base("tiny-random", num_threads=0)
