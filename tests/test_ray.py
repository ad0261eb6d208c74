"""The population on Ray (run.backend=ray): the same records as in-process, deterministic with
two workers, a killed worker repaired, resume across backends, a lost cluster named.

Ray is started here with 2 CPUs and shut down after the module; every run is closed (its
actors killed) before the next starts, so no test needs more than 2 CPUs.
"""

from __future__ import annotations

import copy
import os
import shutil
import signal
import time

import pytest
from run_helpers import TINY_OVERRIDES

from evolora.callbacks import Checkpointer
from evolora.config import ConfigError, config_from_dict, load_run_config
from evolora.io import read_jsonl
from evolora.loggers import JsonlLogger
from evolora.run import Run
from evolora.tasks.toy import ToyTask

pytestmark = pytest.mark.slow  # over ~5 s each: CI runs them, `-m "not slow"` skips them

ray = pytest.importorskip("ray")

STEPS = 4
TIMING = ("seconds", "tokens_per_second", "peak_rss_mb", "workers")
TOY = {"name": "toy", "params": {"max_problem_chars": 40}}


@pytest.fixture(scope="module")
def cluster():
    if ray.is_initialized():  # a cluster another module left up: start the bounded one
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _config(**run):
    overrides = copy.deepcopy(TINY_OVERRIDES)
    overrides["model"]["num_threads"] = 1  # as each worker: same threads, same float sums
    overrides["task"] = TOY
    overrides["run"].update({"steps": STEPS, **run})
    return config_from_dict(overrides)


def _records(out) -> dict[str, list[dict]]:
    metrics = [{k: v for k, v in r.items() if k not in TIMING} for r in read_jsonl(out / "metrics.jsonl")]
    return {"metrics": metrics, "matches": read_jsonl(out / "matches.jsonl")}


def _train(config, out, task=None, close=True) -> Run:
    run = Run(config, out, task=task or ToyTask(max_problem_chars=40))
    run.train([JsonlLogger(), Checkpointer(config.run.checkpoint_every, config.run.steps)])
    if close:
        run.close()
    return run


class _KillingTask(ToyTask):
    """The toy task, killing one worker (Ray restarts it) while it verifies step ``at``'s proposals,
    between the teacher and the student rollouts."""

    def __init__(self, at: int):
        super().__init__(max_problem_chars=40)
        self.at, self.calls, self.victim, self.kills = at, 0, None, 0

    def verify(self, proposals):
        self.calls += 1
        if self.calls == self.at:
            ray.kill(self.victim, no_restart=False)
            self.kills += 1
            deadline = time.monotonic() + 120
            while not self._restarted():
                assert time.monotonic() < deadline, "the killed worker did not restart"
                time.sleep(0.05)
        return super().verify(proposals)

    def _restarted(self) -> bool:
        """True once the restarted worker answers (it says it was restarted and not restored yet)."""
        try:
            return ray.get(self.victim.ping.remote())
        except ray.exceptions.RayActorError:  # killed, not back yet
            return False


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, single_thread):
    out = tmp_path_factory.mktemp("local")
    _train(_config(), out)
    return out


@pytest.fixture(scope="module")
def ray_one(tmp_path_factory, cluster, single_thread):
    """A workers=1 run, then its worker killed for good and one more step tried (the ClusterLost error)."""
    out = tmp_path_factory.mktemp("ray1")
    run = _train(_config(backend="ray", workers=1), out, close=False)
    ray.kill(run.bank.actors[0], no_restart=True)
    with pytest.raises(Exception) as lost:
        run.run_step()
    run.close()
    return out, lost.value


@pytest.fixture(scope="module")
def ray_two(tmp_path_factory, cluster, single_thread):
    out = tmp_path_factory.mktemp("ray2")
    _train(_config(backend="ray", workers=2), out)
    return out


def test_one_ray_worker_replays_the_local_run_record_for_record(local_run, ray_one):
    local, ray_run = _records(local_run), _records(ray_one[0])
    assert [r["step"] for r in ray_run["metrics"]] == list(range(1, STEPS + 1))
    assert ray_run == local
    assert any(r["births"] for r in ray_run["metrics"])  # evolution moved factors through the object store
    timing = read_jsonl(ray_one[0] / "metrics.jsonl")[-1]
    assert set(timing["workers"]) == {"w0"} and timing["workers"]["w0"]["rollout"] > 0
    assert 0 <= timing["seconds"]["driver_overhead"] < timing["seconds"]["total"]


def test_two_workers_are_deterministic_and_repeat_a_step_after_a_killed_worker(
    ray_two, tmp_path, cluster, single_thread
):
    task = _KillingTask(at=3)
    config = _config(backend="ray", workers=2)
    run = Run(config, tmp_path, task=task)
    task.victim = run.bank.actors[1]  # owns T1, S1 (slot i -> worker i mod 2)
    assert run.bank.shard(1) == ["T1", "S1"] and run.bank.shard(0) == ["T0", "S0"]
    run.train([JsonlLogger(), Checkpointer(1, STEPS)])
    run.close()
    assert task.kills == 1 and task.calls == STEPS + 1  # step 3 was played twice
    assert _records(tmp_path) == _records(ray_two)
    assert set(read_jsonl(ray_two / "metrics.jsonl")[0]["workers"]) == {"w0", "w1"}


class _SigkillTask(ToyTask):
    """The toy task, sending SIGKILL to one worker's process while it verifies step ``at``'s
    proposals (between the teacher and the student rollouts), without waiting for Ray to restart it."""

    def __init__(self, at: int):
        super().__init__(max_problem_chars=40)
        self.at, self.calls, self.victim, self.pids = at, 0, None, []

    def verify(self, proposals):
        self.calls += 1
        if self.calls == self.at:
            self.pids.append(ray.get(self.victim.__ray_call__.remote(lambda worker: os.getpid())))
            os.kill(self.pids[0], signal.SIGKILL)
        return super().verify(proposals)


def test_a_worker_killed_with_sigkill_is_recovered_within_the_run(ray_two, tmp_path, cluster, single_thread):
    """Checkpoints every 2 steps; worker 1's process killed during step 4: the run waits for Ray to
    restart it, restores both workers from step 2, replays step 3 and repeats step 4, and ends
    with the undisturbed run's records, without ``--resume``."""
    task = _SigkillTask(at=4)
    config = _config(backend="ray", workers=2, checkpoint_every=2)
    run = Run(config, tmp_path, task=task)
    task.victim = run.bank.actors[1]
    run.train([JsonlLogger(), Checkpointer(config.run.checkpoint_every, STEPS)])
    new_pid = ray.get(run.bank.actors[1].__ray_call__.remote(lambda worker: os.getpid()))
    run.close()
    assert task.pids and new_pid != task.pids[0]  # a new process
    assert run.step == STEPS and task.calls == STEPS + 2  # step 3 replayed, step 4 played twice
    assert run.log_counts == {"metrics": STEPS, "matches": len(read_jsonl(tmp_path / "matches.jsonl"))}
    assert _records(tmp_path) == _records(ray_two)


def test_a_run_resumes_across_backends(local_run, tmp_path, cluster, single_thread):
    config = _config()
    first = Run(config, tmp_path, task=ToyTask(max_problem_chars=40))  # local, stopped after 2 of 4 steps
    first.train([JsonlLogger(), Checkpointer(1, STEPS)], steps=2)
    second = Run(_config(backend="ray", workers=1), tmp_path, task=ToyTask(max_problem_chars=40))
    assert second.load_checkpoint() and second.step == 2
    second.train([JsonlLogger(), Checkpointer(1, STEPS)])
    second.finish(evaluate=False)
    second.close()
    assert _records(tmp_path) == _records(local_run)  # local 2 steps, then ray to 4 = local 4 steps
    assert (tmp_path / "final" / "t0" / "adapter_model.safetensors").is_file()  # from a worker's state dict


def test_a_ray_checkpoint_resumes_locally(local_run, ray_one, tmp_path, single_thread):
    from evolora.cli.execute import _execute

    out = tmp_path / "run"
    shutil.copytree(ray_one[0], out)
    shutil.rmtree(out / "checkpoints" / f"step_{STEPS:06d}")  # back to the ray run's step 3
    assert load_run_config(out).run.backend == "ray"
    _execute(load_run_config(out, ["run.backend=local"]), out, resume=True, evaluate=False)
    assert _records(out) == _records(local_run)


def test_a_lost_cluster_names_the_run_directory_to_resume(ray_one):
    out, error = ray_one
    assert type(error).__name__ == "ClusterLost"
    assert f"--resume {out}" in str(error) and f"step {STEPS + 1}" in str(error)


@pytest.mark.parametrize(
    "run, message",
    [
        ({"workers": 2}, "needs run.backend=ray"),
        ({"backend": "ray", "workers": 5}, "set run.workers <= 4"),
        ({"ray_address": "auto"}, "only read with run.backend=ray"),
    ],
)
def test_backend_settings_are_checked_when_the_config_loads(run, message):
    with pytest.raises(ConfigError, match=message):
        _config(**run)


def test_ray_missing_says_how_to_install_it(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install 'evolora\[ray\]'"):
        _config(backend="ray")


def test_tensors_cross_the_boundary_as_numpy_bit_for_bit():
    import numpy as np
    import torch

    from evolora.distributed.actor import Bits, pack, unpack

    gen = torch.Generator().manual_seed(0)
    state = {
        "a": (torch.randn(3, 4, generator=gen), torch.randn(4, 3, generator=gen).to(torch.bfloat16)),
        "step": torch.tensor(7.0),
        "groups": [{"lr": 0.01, "params": [0, 1]}],
    }
    packed = pack(state)
    assert isinstance(packed["a"][0], np.ndarray) and isinstance(packed["a"][1], Bits)
    assert packed["a"][1].dtype == "bfloat16" and packed["groups"] == state["groups"]
    back = unpack(packed)
    assert back["a"][1].dtype == torch.bfloat16 and torch.equal(back["a"][1], state["a"][1])
    assert torch.equal(back["a"][0], state["a"][0]) and back["step"].item() == 7.0
    back["a"][0].add_(1.0)  # a copy of its own: writable, the original untouched
    assert torch.equal(unpack(packed)["a"][0], state["a"][0])


@pytest.fixture(scope="module")
def sharded(cluster, single_thread):
    """A 2-worker ShardedBank over 4 slots with the run's initial factors, and the same in-process."""
    import torch

    from evolora.bank.local import AdapterBank
    from evolora.distributed.sharded_bank import ShardedBank
    from evolora.model import load_base

    config = _config(backend="ray", workers=2)
    slots = ["T0", "T1", "S0", "S1"]
    bank = ShardedBank(config, slots)
    base, tokenizer = load_base(config.model.name, dtype=config.model.dtype, num_threads=1)
    local = AdapterBank(
        base, slots, rank=config.lora.rank, alpha=config.lora.alpha, target_modules=config.lora.target_modules
    )
    for target in (bank, local):
        init = torch.Generator().manual_seed(0)
        for slot in slots:
            target.init_factors(slot, init, b_std=0.3)
    yield bank, local, tokenizer
    bank.close()


def test_a_sharded_bank_refuses_a_bad_adapter_on_the_driver(sharded):
    import torch

    bank, local, _ = sharded
    good = local.get_factors("T1")
    bad = {name: (a.clone(), b.clone()) for name, (a, b) in good.items()}
    next(iter(bad.values()))[0][0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        bank.set_factors("T1", bad)
    with pytest.raises(ValueError, match="do not match"):
        bank.set_factors("T1", dict(list(good.items())[1:]))
    with pytest.raises(KeyError):
        bank.set_factors("X9", good)
    fetched = bank.get_factors("T1")  # nothing was sent: the worker's slot is as before
    assert all(torch.equal(fetched[m][0], good[m][0]) and torch.equal(fetched[m][1], good[m][1]) for m in good)
    bank._bad.add("T1")  # as an update that left NaN would: a finite write clears it, without a call
    bank.set_factors("T1", good)
    assert bank.nonfinite(["T0", "T1"]) == []


def test_verdict_scores_and_logprobs_on_two_workers_equal_the_in_process_bank(sharded):
    import torch

    from evolora.critic.evaluation import verdict_scores
    from evolora.generation.routed import BASE
    from evolora.learner import Sample

    bank, local, tokenizer = sharded
    names = ["S1", BASE, "T0", "T1", BASE, "S0"]  # workers 1, any, 0, 1, any, 0
    samples = [
        Sample(tuple(range(5, 5 + n)), tuple(range(20, 20 + m)), 0.0, "")
        for n, m in [(4, 3), (6, 1), (3, 5), (5, 2), (4, 4), (2, 6)]
    ]
    ours, theirs = bank.logprobs(names, samples), local.logprobs(names, samples)
    assert ours.shape == theirs.shape == (6, 6) and ours[1, 1:].abs().sum() == 0  # padding stays 0
    assert torch.allclose(ours, theirs, atol=1e-5) and (ours[:, 0] < 0).all()
    task = ToyTask(max_problem_chars=40)
    reviews = [("1 + 1", "2"), ("3 * 3", "The answer is 8."), ("2 + 5", "7")]
    judges = {BASE: "base", "T0": "t0", "T1": "t1", "S1": "s1"}
    scores = verdict_scores(bank, tokenizer, task, judges, reviews, batch_size=5)  # chunks across workers
    expected = verdict_scores(local, tokenizer, task, judges, reviews, batch_size=5)
    assert set(scores) == {"base", "t0", "t1", "s1"}
    for judge in scores:
        assert scores[judge] == pytest.approx(expected[judge], abs=1e-5)
    assert scores["t1"] != pytest.approx(scores["base"], abs=1e-4)  # the adapters change the judge
