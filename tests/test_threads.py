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


class _Machine:
    """A faked machine: ``probe`` (the full sample, counted) and ``glance`` read the same
    (cores, others, beside), ``glance_others`` optionally noisier; ``now`` is the policy's clock."""

    def __init__(self, cores=2, others=0.0, beside=0):
        self.cores, self.others, self.beside, self.now = cores, others, beside, 0.0
        self.glance_others = None
        self.probes = 0

    def probe(self):
        self.probes += 1
        return self.cores, self.others, self.beside

    def glance(self):
        others = self.others if self.glance_others is None else self.glance_others
        return self.cores, others, self.beside

    def policy(self, say=None):
        return ThreadPolicy("auto", say=say, probe=self.probe, glance=self.glance, clock=lambda: self.now)


def test_a_run_appearing_mid_step_takes_effect_at_the_next_phase_with_one_line():
    machine, lines = _Machine(), []
    policy = machine.policy(lines.append)
    assert policy.apply() == 2 and lines == []
    assert policy.at_phase("selfplay") == 2 and torch.get_num_threads() == 2
    machine.beside = 1  # a second run takes its lock during the play
    assert policy.at_phase("train") == 1 and torch.get_num_threads() == 1
    for phase in ("evolve", "held_out", "held_out"):
        assert policy.at_phase(phase) == 1
    assert len(lines) == 1 and "1 evolora run beside this one" in lines[0] and "torch uses 1 thread" in lines[0]
    machine.beside = 0  # it ends
    assert policy.at_phase("selfplay") == 2 and torch.get_num_threads() == 2
    assert len(lines) == 2 and lines[1].startswith("cores freed")
    assert machine.probes == 3  # the first check and the two changes; no sample where the glance agreed


def test_a_noisy_glance_takes_at_most_one_full_sample_per_recheck_gap():
    """One read of the runnable count disagrees at every phase (2 others where the median says 0):
    over 1000 phases 2 s apart, a full sample every RECHECK_GAP seconds only, and the count stays."""
    from evolora.model.threads import RECHECK_GAP

    machine, lines = _Machine(), []
    policy = machine.policy(lines.append)
    policy.apply()
    machine.glance_others = 2.0
    for _ in range(1000):
        machine.now += 2.0
        assert policy.at_phase("train") == 2
    assert machine.probes == 1 + int(2000 // RECHECK_GAP) and policy.samples == machine.probes
    assert torch.get_num_threads() == 2 and lines == []


def test_a_busy_machine_seen_by_the_glance_is_confirmed_by_the_sample_within_the_gap():
    from evolora.model.threads import RECHECK_GAP

    machine = _Machine()
    policy = machine.policy()
    policy.apply()
    machine.others = 2.0  # another process keeps two threads busy: glance and sample agree
    machine.now += RECHECK_GAP / 2
    assert policy.at_phase("train") == 2  # within the gap since the last sample: not sampled yet
    machine.now += RECHECK_GAP / 2
    assert policy.at_phase("evolve") == 1 and torch.get_num_threads() == 1
    assert machine.probes == 2


@pytest.mark.parametrize("setting", [1, 3, None])
def test_an_int_or_none_is_never_changed_at_a_phase(setting):
    def probe():
        raise AssertionError("probed")

    torch.set_num_threads(2)
    policy = ThreadPolicy(setting, probe=probe, glance=probe)
    policy.apply()
    for phase in ("selfplay", "train", "evolve", "held_out"):
        policy.at_phase(phase)
    assert torch.get_num_threads() == (2 if setting is None else setting) and policy.samples == 0


def test_a_run_calls_its_phase_hooks_at_each_phase_and_its_threads_change_mid_step(tmp_path):
    """A tiny run with critics: each step's plays, train and evolve, then the end's fitness and
    held-out batches, reach the hooks; a second run appearing during the first play has the update
    run on one thread, in the same step."""
    import copy

    from run_helpers import TINY_OVERRIDES, judged_toy

    from evolora.config import config_from_dict
    from evolora.model import load_base
    from evolora.run import Run

    data = copy.deepcopy(TINY_OVERRIDES)
    data["population"] = {"roles": {"teacher": 2, "student": 2, "critic": 2}}
    data["run"]["steps"] = 1
    model, tokenizer = load_base("tiny-random")
    run = Run(config_from_dict(data), tmp_path, model=model, tokenizer=tokenizer, task=judged_toy())
    machine, seen = _Machine(), []
    policy = machine.policy()
    torch.set_num_threads(1)
    policy.apply()

    def watch(phase):
        seen.append((phase, torch.get_num_threads()))
        machine.beside = 1  # the second run is up from the first phase on

    run.phase_hooks += [policy.at_phase, watch]
    run.train()
    run.finish()
    phases = [phase for phase, _ in seen]
    assert phases[:4] == ["selfplay", "review", "train", "evolve"]
    assert phases[4] == "fitness" and set(phases[5:]) == {"held_out"} and len(phases) > 5
    assert seen[0] == ("selfplay", 2) and all(threads == 1 for _, threads in seen[1:])


def test_the_lock_scan_reads_a_holders_files_once_per_lock(monkeypatch):
    """A phase's glance scans the locks: a holder's open files are read when it first holds a lock
    (or a new one), not at every scan; a holder gone is forgotten."""
    from evolora.model import threads

    held, reads = {10: {1}, 11: {2}}, []
    monkeypatch.setattr(threads, "_RUN_LOCKS", {})
    monkeypatch.setattr(threads, "_held_flocks", lambda: {pid: set(inodes) for pid, inodes in held.items()})
    monkeypatch.setattr(threads, "_holds_run_lock", lambda pid, inodes: reads.append(pid) or 2 in inodes)
    assert [runs_beside() for _ in range(5)] == [1] * 5 and sorted(reads) == [10, 11]
    held[10] = {1, 2}  # process 10 takes a run's lock too
    assert runs_beside() == 2 and sorted(reads) == [10, 10, 11]
    del held[11]
    assert runs_beside() == 1 and list(threads._RUN_LOCKS) == [(10, frozenset({1, 2}))]
