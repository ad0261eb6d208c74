"""A fourth role from config and a play function alone: its members play, train, are rated, evolve
and are recorded, with no change to ``Run`` (:mod:`evolora.plays`, :mod:`evolora.config.plays`)."""

from __future__ import annotations

import copy

import pytest
import torch
from run_helpers import TINY_OVERRIDES

from evolora.callbacks import Checkpointer, JsonlLogger
from evolora.config import ConfigError, config_from_dict
from evolora.generation.rollout import RolloutStats, chat_prompt
from evolora.io import read_jsonl
from evolora.model import load_base
from evolora.plays import PLAYS, Played, PlaySpec
from evolora.run import Run
from evolora.selfplay import to_sample

JUDGMENTS = 4
"""Completions each judge writes per step."""


def play_judge(run, step, game):
    """Each judge writes ``JUDGMENTS`` short completions about one solver of the step (round robin);
    a completion of even length is a hit (reward 1, else 0). The pair's score is the judge's hit rate."""
    students, judges = run.population.players(game)
    pairs = [(students[j % len(students)].id, judge) for j, judge in enumerate(judges)]
    prompts = [chat_prompt(run.tokenizer, [{"role": "user", "content": f"Judge {s}."}]) for s, _ in pairs]
    rows = [(pair, prompt) for pair, prompt in zip(pairs, prompts) for _ in range(JUDGMENTS)]
    stats = RolloutStats()
    done = run.bank.rollout(
        [prompt for _, prompt in rows],
        [judge.slot for (_, judge), _ in rows],
        run.config.selfplay.sampling(game.solver),  # selfplay.roles.judge
        stats=stats,
        generator=torch.Generator().manual_seed(step.number),
    )
    hits = [float(len(c.text) % 2 == 0) for c in done]
    samples = {judge.id: [] for judge in judges}
    for ((_, judge), _), completion, hit in zip(rows, done, hits):
        samples[judge.id].append(to_sample(completion, hit, group=f"judge:{judge.id}"))
    rates = {
        (s, judge.id): sum(hits[i * JUDGMENTS : (i + 1) * JUDGMENTS]) / JUDGMENTS for i, (s, judge) in enumerate(pairs)
    }

    def section(done_step, outcomes):
        return {
            "judge": {
                "hits": sum(hits),
                "rates": {f"{s}|{j}": r for (s, j), r in rates.items()},
                "match_outcomes": outcomes,
            }
        }

    return Played(
        samples=samples,
        rates=rates,
        tally={judge.id: {"judged": JUDGMENTS} for judge in judges},
        seconds={"rollout_judge": stats.seconds},
        rollout=stats,
        section=section,
    )


@pytest.fixture
def judge_play(monkeypatch):
    monkeypatch.setitem(PLAYS, "toy_judge", PlaySpec("toy_judge", f"{__name__}:play_judge", "a toy judge"))


def _config(play="toy_judge", roles=None, **selfplay):
    data = copy.deepcopy(TINY_OVERRIDES)
    data["population"] = {"roles": roles or {"teacher": 2, "student": 2, "judge": 2}}
    data["run"]["steps"] = 3
    data["selfplay"]["roles"]["judge"] = {"max_new_tokens": 5}
    data["selfplay"].update(plays=[{"play": play, "proposer": "student", "solver": "judge"}], **selfplay)
    return config_from_dict(data)


def test_a_fourth_role_plays_trains_is_rated_evolves_and_is_recorded(judge_play, toy_task, tmp_path, single_thread):
    config = _config()
    assert config.role_sizes == {"teacher": 2, "student": 2, "judge": 2}
    assert config.selfplay.sampling("judge").max_new_tokens == 5
    assert [g.play for g in config.arm.pipeline] == ["selfplay", "review", "toy_judge"]
    model, tokenizer = load_base("tiny-random")
    run = Run(config, tmp_path, model=model, tokenizer=tokenizer, task=toy_task)
    judges = [m for m in run.population.members if m.role == "judge"]
    assert [m.id for m in judges] == ["j0", "j1"] and [m.slot for m in judges] == ["J0", "J1"]
    before = {m.slot: run.bank.get_factors(m.slot) for m in judges}
    record, games = run.run_step()
    after = {slot: run.bank.get_factors(slot) for slot in before}
    for slot, factors in before.items():  # updated: every judge's B factors moved
        assert any(not torch.equal(factors[k][1], after[slot][k][1]) for k in factors), slot
    assert record["trained_samples"]["j0"] > 0 and record["trained_samples"]["j1"] > 0
    assert record["seconds"]["rollout_judge"] > 0 and "critic" not in record  # no critics: no review
    assert set(record["judge"]["match_outcomes"]) == {"s0|j0", "s1|j1"}
    assert all(g.teacher.startswith("t") for g in games)  # the judge adds no match lines
    survivors = [j for j in ("j0", "j1") if j in record["ratings"]]  # evolution replaced one judge
    assert survivors and record["ratings"][survivors[0]]["sigma"] < 25 / 3 - 1e-6  # rated: its σ shrank
    run.train([JsonlLogger(), Checkpointer(1, 3)])
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [2, 3] and all(r["judge"]["hits"] >= 0 for r in records)
    births = [b for r in [record, *records] for b in r["births"]]
    assert "judge" in {b["role"] for b in births}  # evolved like every role
    summary = run.finish(evaluate=False)
    judged = [row for row in summary["individuals"] if row["role"] == "judge"]
    assert len(judged) == 2 and all(row["games"].get("judged", 0) % JUDGMENTS == 0 for row in judged)
    assert sum(row["games"].get("judged", 0) for row in judged) > 0
    assert set(summary["diversity"]) == {"teacher", "student", "judge"}


def test_a_fourth_role_resumes_bit_identically(judge_play, toy_task, tmp_path, single_thread):
    config = _config()

    def run(out):
        model, tokenizer = load_base("tiny-random")
        return Run(config, out, model=model, tokenizer=tokenizer, task=toy_task)

    run(tmp_path / "full").train([JsonlLogger(), Checkpointer(1, 3)])
    run(tmp_path / "part").train([JsonlLogger(), Checkpointer(1, 3)], steps=1)
    resumed = run(tmp_path / "part")
    assert resumed.load_checkpoint() and resumed.step == 1
    resumed.train([JsonlLogger(), Checkpointer(1, 3)])
    drop = lambda r: {k: v for k, v in r.items() if k not in ("seconds", "tokens_per_second", "peak_rss_mb")}  # noqa: E731
    a, b = read_jsonl(tmp_path / "full" / "metrics.jsonl"), read_jsonl(tmp_path / "part" / "metrics.jsonl")
    assert [drop(r) for r in a] == [drop(r) for r in b] and a[0]["judge"]["hits"] >= 0


def test_a_play_is_named_in_yaml_by_its_module_path(tmp_path):
    config = _config(play=f"{__name__}:play_judge")
    assert config.arm.pipeline[-1].play == f"{__name__}:play_judge"


@pytest.mark.parametrize(
    ("play", "roles", "words"),
    [
        ("no_such_play", None, ["unknown play 'no_such_play'", "selfplay", "review", "package.module:function"]),
        ("no_such_module:play", None, ["cannot import module 'no_such_module'"]),
        (f"{__name__}:missing", None, ["has no attribute 'missing'"]),
        ("toy_judge", {"teacher": 2, "student": 2}, ["selfplay.plays[0].solver", "'judge' has no members"]),
    ],
)
def test_bad_plays_are_refused_when_the_config_loads(judge_play, play, roles, words):
    with pytest.raises(ConfigError) as caught:
        _config(play=play, roles=roles)
    assert all(word in str(caught.value) for word in words), str(caught.value)


def play_raising(run, step, game):
    """A play of the user's own that fails."""
    raise ZeroDivisionError("my judge's tally")


def play_returning_a_dict(run, step, game):
    """A play of the user's own that breaks its contract."""
    return {"samples": {}}


@pytest.mark.parametrize(
    ("play", "problem"),
    [("play_raising", "raised ZeroDivisionError: my judge's tally"), ("play_returning_a_dict", "returned a dict")],
)
def test_a_failing_play_of_the_users_is_named_by_the_step(toy_task, tmp_path, single_thread, play, problem):
    from evolora.plays import CONTRACT
    from evolora.user_code import UserCodeError

    config = _config(play=f"{__name__}:{play}")
    model, tokenizer = load_base("tiny-random")
    run = Run(config, tmp_path, model=model, tokenizer=tokenizer, task=toy_task)
    with pytest.raises(UserCodeError) as caught:
        run.run_step()
    message = str(caught.value)
    assert message.startswith(f"selfplay.plays '{__name__}:{play}' {problem}")
    assert message.endswith(f"; the contract: {CONTRACT}") and "\n" not in message
    assert isinstance(caught.value.__cause__, ZeroDivisionError) == (play == "play_raising")
    assert run.step == 0  # the step did not count
