"""The critic role: config, prompts and parsing, balanced rewards, survival, ratings,
matchmaking, evolution and resume on the tiny model."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import random

import pytest
import torch
from run_helpers import TINY_OVERRIDES, judged_toy

from evolora.callbacks import Checkpointer, JsonlLogger
from evolora.config import ConfigError, RewardConfig, SelfPlayConfig, config_from_dict, load_config
from evolora.critic import Review, balanced_weights, critic_rewards, review_rates, review_summary, survival_bonus
from evolora.game import ARMS, POPULATION_ROLES, REQUIRED_ROLES, Game
from evolora.io import read_jsonl
from evolora.model import load_base
from evolora.run import Run
from evolora.tasks.arith import ArithTask
from evolora.tasks.base import Grade, parse_verdict
from evolora.tasks.gsm import GSMTask
from evolora.tasks.toy import ToyTask

CRITICS = {"roles": {"teacher": 2, "student": 2, "critic": 2}}
VOLATILE = ("seconds", "tokens_per_second", "peak_rss_mb")


def _config(population=CRITICS, **sections):
    data = copy.deepcopy(TINY_OVERRIDES)
    data["population"] = population
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    return config_from_dict(data)


def _run(config, out, task=None, steps=None):
    model, tokenizer = load_base("tiny-random")
    run = Run(config, out, model=model, tokenizer=tokenizer, task=task or judged_toy())
    run.train([JsonlLogger(), Checkpointer(1, config.run.steps)], steps=steps)
    return run


def _records(out):
    return (
        [{k: v for k, v in r.items() if k not in VOLATILE} for r in read_jsonl(out / "metrics.jsonl")],
        read_jsonl(out / "matches.jsonl"),
    )


# -- config ------------------------------------------------------------------------------------
def test_critics_are_an_optional_third_role_of_the_population_arm():
    assert ARMS["population"].pipeline == (Game("teacher", "student"), Game("student", "critic", play="review"))
    assert POPULATION_ROLES == ("teacher", "student", "critic") and REQUIRED_ROLES == ("teacher", "student")
    config = _config()
    assert config.role_sizes == {"teacher": 2, "student": 2, "critic": 2} and config.population.critics == 2
    assert _config({"teachers": 2, "students": 2, "critics": 3}).role_sizes["critic"] == 3
    assert _config({"teachers": 2, "students": 2}).role_sizes == {"teacher": 2, "student": 2}
    assert config.selfplay.sampling("critic").max_new_tokens == 8


@pytest.mark.parametrize(
    ("sections", "words"),
    [
        ({"selfplay": {"mode": "single_agent"}}, ["population.critics", "single_agent"]),
        ({"selfplay": {"rewards": {"refuted": 0.5}}}, ["selfplay.rewards.refuted", "less than or equal to 0"]),
        ({"selfplay": {"rewards": {"survived": -0.5}}}, ["selfplay.rewards.survived", "greater than or equal to 0"]),
        ({"selfplay": {"roles": {"critic": {"max_new_tokens": 0}}}}, ["selfplay.roles.critic.max_new_tokens"]),
    ],
)
def test_bad_critic_settings_are_refused_with_the_key(sections, words):
    with pytest.raises(ConfigError) as caught:
        _config(**sections)
    assert all(word in str(caught.value) for word in words), str(caught.value)


def test_every_shipped_task_config_loads_and_the_critic_ones_have_three_roles():
    from pathlib import Path

    paths = sorted(Path("tasks").glob("*.yaml"))
    assert {"arith_critic.yaml", "gsm_critic.yaml"} <= {p.name for p in paths}
    for path in paths:
        config = load_config(path)
        critics = config.role_sizes.get("critic", 0)
        assert critics == (2 if path.stem.endswith("_critic") else 0), path
    arith = load_config("tasks/arith_critic.yaml")
    plain = load_config("tasks/arith.yaml")
    assert arith.task == plain.task and arith.learner == plain.learner and arith.evolution == plain.evolution


# -- prompts and parsing ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("Verdict: correct", "correct"),
        ("Verdict: incorrect", "incorrect"),
        ("Verdict:  **Correct**.", "correct"),
        ("Verdict: not correct", "incorrect"),
        ("Verdict: wrong, it is 12", "incorrect"),
        ("Verdict: 12", None),
        ("Verdict:", None),
        ("correct is incorrect. Verdict: incorrect", "incorrect"),
        ("The answer is correct", "correct"),
        ("Verdict: incorrectly", None),
    ],
)
def test_parse_verdict(text, verdict):
    assert parse_verdict(text) == verdict


def test_task_critic_prompts_show_the_problem_and_the_answer():
    arith = ArithTask()
    messages = arith.critic_prompt("3 + 4 * 2", "The answer is 11.")
    user = messages[-1]["content"]
    assert "Problem: 3 + 4 * 2" in user and "Proposed answer: 11\n" in user and "Verdict: incorrect" in user
    assert arith.critic_answer("no number here") == "no number here" and arith.critic_prefix == "Verdict:"
    gsm = GSMTask.__new__(GSMTask)  # the prompt needs no data or sandbox
    user = gsm.critic_prompt("Tom has 3 apples ...", "3 + 2 = 5\n#### 5")[-1]["content"]
    assert "Proposed solution:\n3 + 2 = 5\n#### 5" in user and user.endswith("'Verdict: incorrect'.")
    toy = ToyTask()  # the Task defaults
    assert "Proposed answer: 42" in toy.critic_prompt("q", "  42  ")[-1]["content"]
    assert toy.parse_verdict("Verdict: correct") == "correct"


# -- rewards -----------------------------------------------------------------------------------
@pytest.mark.parametrize("correct", [1, 2, 5, 9])
def test_constant_critics_earn_zero_and_a_perfect_one_earns_one(correct):
    truths = ["correct"] * correct + ["incorrect"] * (10 - correct)
    rewards = RewardConfig()
    for constant in ("correct", "incorrect"):
        assert sum(critic_rewards([constant] * 10, truths, rewards)) == pytest.approx(0.0, abs=1e-12)
    assert sum(critic_rewards(truths, truths, rewards)) / 10 == pytest.approx(1.0)
    flipped = ["incorrect" if t == "correct" else "correct" for t in truths]
    assert sum(critic_rewards(flipped, truths, rewards)) / 10 == pytest.approx(-1.0)


def test_mean_critic_reward_is_tpr_plus_tnr_minus_one_and_a_coin_earns_zero_in_expectation():
    rng = random.Random(0)
    truths = ["correct"] * 3 + ["incorrect"] * 7
    for _ in range(20):
        verdicts = [rng.choice(["correct", "incorrect"]) for _ in truths]
        tpr = sum(v == t == "correct" for v, t in zip(verdicts, truths)) / 3
        tnr = sum(v == t == "incorrect" for v, t in zip(verdicts, truths)) / 7
        assert sum(critic_rewards(verdicts, truths, RewardConfig())) / 10 == pytest.approx(tpr + tnr - 1)
    every = list(itertools.product(["correct", "incorrect"], repeat=len(truths)))  # the coin's 1024 outcomes
    assert sum(sum(critic_rewards(list(v), truths, RewardConfig())) for v in every) == pytest.approx(0.0, abs=1e-9)


def test_one_class_steps_weigh_nothing_and_format_gets_the_format_reward():
    assert balanced_weights(["incorrect"] * 4) == {"correct": 0.0, "incorrect": 0.0}
    rewards = RewardConfig(format=-0.7)
    assert critic_rewards([None, "incorrect"], ["correct", "incorrect"], rewards) == [-0.7, 1.0]


def test_survival_is_off_by_default_and_signed_when_set():
    off, on = RewardConfig(), RewardConfig(refuted=-0.3, survived=0.2)
    cases = [("incorrect", "incorrect"), ("correct", "correct"), ("correct", "incorrect"), (None, "correct")]
    assert [survival_bonus(v, t, off) for v, t in cases] == [0.0, 0.0, 0.0, 0.0]
    assert [survival_bonus(v, t, on) for v, t in cases] == [-0.3, 0.2, 0.0, 0.0]


def test_review_rates_and_summary():
    reviews = [
        Review("c0", "s0", 0, 0, "correct", "correct", ""),
        Review("c0", "s0", 0, 1, "incorrect", "correct", ""),
        Review("c1", "s1", 1, 0, "incorrect", None, ""),
        Review("c1", "s1", 1, 1, "incorrect", "incorrect", ""),
    ]
    assert review_rates(reviews) == {("s0", "c0"): 0.5, ("s1", "c1"): 0.5}
    summary = review_summary(reviews)
    assert summary["parse_rate"] == 0.75 and summary["agreement"] == 0.5
    assert summary["balanced_accuracy"] == pytest.approx((1.0 + 1 / 3) / 2) and summary["truly_correct"] == 0.25
    assert summary["said_correct"] == 0.5 and summary["contested"] == 0.0
    assert summary["per_critic"] == {
        "c0": {"balanced_accuracy": 0.5, "said_correct": 1.0, "truly_correct": 0.5},
        "c1": {"balanced_accuracy": None, "said_correct": 0.0, "truly_correct": 0.0},
    }


# -- the loop on the tiny model -----------------------------------------------------------------
def test_a_critic_run_reviews_trains_rates_and_evolves_critics(tmp_path, single_thread):
    config = _config(run={"steps": 3}, selfplay={"rewards": {"refuted": -0.25, "survived": 0.5}})
    run = _run(config, tmp_path)
    metrics, matches = _records(tmp_path)
    critic = metrics[0]["critic"]
    assert critic["reviews"] == sum(len(m["reviews"]) for m in matches if m["step"] == 1) > 0
    assert 0 < critic["parse_rate"] < 1 and set(critic["match_outcomes"].values()) <= {"student", "critic", "draw"}
    assert all(k.startswith("s") and k.split("|")[1].startswith("c") for k in critic["pair_agreement"])
    critics = [i for i in metrics[0]["trained_samples"] if i.startswith("c")]  # who played step 1
    assert critics == ["c0", "c1"] and sum(metrics[0]["trained_samples"][i] for i in critics) == critic["reviews"]
    assert run.ratings.table()[0]["matches"] > 0
    survivor = [i for i in critics if i in metrics[0]["ratings"]]  # a critic evolution kept
    assert survivor and abs(metrics[0]["ratings"][survivor[0]]["mu"] - 25.0) > 1e-6  # rated
    births = [b for r in metrics for b in r["births"]]
    assert {b["role"] for b in births} == {"teacher", "student", "critic"}  # a critic was replaced by evolution
    assert any(m.role == "critic" and m.born_step > 0 for m in run.population.members)
    plain = judged_toy()
    for match in matches:  # survival: each review added its bonus to the attempt's student reward
        base = [{"correct": 1.0, "wrong": -0.5}[g] for g in match["grades"]]
        for review in match["reviews"]:
            base[review["attempt"]] += survival_bonus(review["verdict"], review["truth"], config.selfplay.rewards)
            assert review["verdict"] == plain.parse_verdict(review["text"])
        assert match["student_rewards"] == pytest.approx(base)
    summary = run.finish(evaluate=False)
    judged = [row for row in summary["individuals"] if row["role"] == "critic"]
    assert all(row["games"].get("reviews", 0) == 0 or row["solve_or_valid_rate"] is not None for row in judged)


def test_the_critics_rollouts_take_their_role_settings(tmp_path, single_thread, monkeypatch):
    roles = {**TINY_OVERRIDES["selfplay"]["roles"], "critic": {"max_new_tokens": 3, "temperature": 0.6, "stop": ["."]}}
    config = _config(run={"steps": 1}, selfplay={"roles": roles})
    model, tokenizer = load_base("tiny-random")
    run = Run(config, tmp_path, model=model, tokenizer=tokenizer, task=judged_toy())
    seen, rollout = [], run.bank.rollout

    def spy(prompts, adapters, sampling, **kwargs):
        seen.append(sampling)
        return rollout(prompts, adapters, sampling, **kwargs)

    monkeypatch.setattr(run.bank, "rollout", spy)
    run.train([], steps=1)
    assert [(s.max_new_tokens, s.temperature) for s in seen[:2]] == [(12, 1.0), (8, 1.0)]  # teacher, student
    critic = [s for s in seen if s.max_new_tokens == 3]
    assert critic and all((s.temperature, s.top_p, s.stop) == (0.6, 1.0, (".",)) for s in critic)


def test_critic_runs_resume_bit_identically(tmp_path, single_thread):
    config = _config(run={"steps": 3})
    full = _run(config, tmp_path / "full")
    _run(config, tmp_path / "part", steps=2)
    model, tokenizer = load_base("tiny-random")
    resumed = Run(config, tmp_path / "part", model=model, tokenizer=tokenizer, task=judged_toy())
    assert resumed.load_checkpoint() and resumed.step == 2
    resumed.train([JsonlLogger(), Checkpointer(1, 3)])
    assert _records(tmp_path / "full") == _records(tmp_path / "part")
    for slot in full.bank.slots:
        a, b = full.bank.get_factors(slot), resumed.bank.get_factors(slot)
        assert all(torch.equal(a[k][0], b[k][0]) and torch.equal(a[k][1], b[k][1]) for k in a)


def test_runs_without_critics_write_no_critic_keys(tmp_path, single_thread):
    _run(_config({"teachers": 2, "students": 2}, run={"steps": 2}), tmp_path)
    metrics, matches = _records(tmp_path)
    assert metrics and matches and all("critic" not in r and "rollout_critic" not in str(r) for r in metrics)
    assert all("reviews" not in m for m in matches)
    assert all(r["role"] != "critic" for m in metrics for r in m["ratings"].values())


# -- held-out critic evaluation -------------------------------------------------------------------
def test_majority_and_best_of_n_pick_the_rows_they_promise():
    from evolora.critic.evaluation import _accepted, _majority

    grades = [
        Grade("wrong", 3.0),
        Grade("correct", 5.0),
        Grade("format", None),
        Grade("correct", 5.0),
        Grade("wrong", 3.0),
        Grade("wrong", 3.0),
    ]
    assert _majority([0, 1, 2], grades) == 0 and _majority([1, 0], grades) == 1  # a tie: the value seen first
    assert _majority([0, 1, 2, 3], grades) == 1 and _majority([3, 0, 4, 5], grades) == 0
    assert _majority([2], grades) == 2  # nothing parsed: the first row
    assert _accepted([0, 1, 3], {0: "incorrect", 1: None, 3: "correct"}) == 3
    assert _accepted([0, 1], {0: "incorrect", 1: "incorrect"}) == 0


def test_a_critic_run_ends_with_a_held_out_critic_evaluation(tmp_path, single_thread):
    from rich.console import Console

    from evolora.cli.display import critic_table

    config = _config(run={"steps": 1}, eval={"limit": 2, "critic_limit": 3, "critic_samples": 2})
    summary = _run(config, tmp_path).finish()
    evaluation = summary["critic_eval"]
    assert evaluation["problems"] == 3 and evaluation["n"] == 2
    assert list(evaluation["judges"])[0] == "base" and list(evaluation["answerers"])[0] == "base"
    assert set(evaluation["judges"]) == {"base", *(m["id"] for m in summary["individuals"] if m["role"] == "critic")}
    assert set(evaluation["answerers"]) == {
        "base",
        *(m["id"] for m in summary["individuals"] if m["role"] == "student"),
    }
    for row in evaluation["answerers"].values():
        values = [row["greedy"], row["single"], row["majority"], *row["best_of_n"].values()]
        assert set(row["best_of_n"]) == set(evaluation["judges"]) and all(0 <= v <= 1 for v in values)
    for judge in evaluation["judges"].values():
        assert judge["reviews"] == 3 * 2 * 3 and 0 <= judge["parse_rate"] <= 1  # every judged_toy answer is graded
        assert judge["auc"] is None or 0 <= judge["auc"] <= 1
    assert all(set(row["best_of_n_score"]) == set(evaluation["judges"]) for row in evaluation["answerers"].values())
    console = Console(record=True, width=200)
    console.print(critic_table(evaluation))
    text = console.export_text()
    assert "best@2 by base" in text and "top@2 by base" in text and "balanced accuracy of each judge: base" in text
    plain = _run(_config({"teachers": 2, "students": 2}, run={"steps": 1}), tmp_path / "plain").finish()
    assert "critic_eval" not in plain


# -- k verdicts per answer (review.samples), stratified reviews (review.reviews) ----------------
def _verdict_samples(verdicts_per_answer, truths, samples, rewards=RewardConfig(), beta=0.0, std=True):
    """The critic samples and advantages of one critic that gave ``verdicts_per_answer[j]`` (k each)
    on answers of true class ``truths[j]``."""
    from evolora.critic import entropy_bonuses, score_reviews, verdict_sample
    from evolora.generation.rollout import Completion
    from evolora.learner import compute_advantages

    reviews = [
        Review("c0", "s0", 0, j, truth, verdict, "")
        for j, (verdicts, truth) in enumerate(zip(verdicts_per_answer, truths))
        for verdict in verdicts
    ]
    scored, weights = score_reviews(reviews, rewards)
    reviews = [dataclasses.replace(r, reward=x) for r, x in zip(reviews, scored)]
    completion = Completion(text="", prompt_ids=(1, 2), completion_ids=(3,), adapter="c0", truncated=False)
    bonuses = entropy_bonuses(reviews, beta)
    config = SelfPlayConfig(review={"samples": samples, "std": std}, rewards=rewards)
    made = [verdict_sample(completion, r, w, config, b) for r, w, b in zip(reviews, weights, bonuses)]
    centred = frozenset(s.group for s in made if s.centred)
    advantages = compute_advantages(
        torch.tensor([s.reward for s in made]), [s.group for s in made], centred=centred
    ) * torch.tensor([s.weight for s in made])
    return made, advantages.tolist()


def test_k_verdicts_per_answer_form_one_group_each_and_a_constant_critic_gets_zero_advantage():
    truths = ["correct", "incorrect", "incorrect", "incorrect"]
    for constant in ("correct", "incorrect"):
        made, advantages = _verdict_samples([[constant] * 4] * 4, truths, 4)
        assert len({s.group for s in made}) == 4 and advantages == [0.0] * 16
    made, advantages = _verdict_samples(
        [["correct", "incorrect"] * 2, ["correct"] * 4, ["correct"] * 3 + ["incorrect"], ["incorrect"] * 4], truths, 4
    )
    assert [s.group for s in made[::4]] == ["critic:c0:0:0", "critic:c0:0:1", "critic:c0:0:2", "critic:c0:0:3"]
    assert [s.reward for s in made[:4]] == [1.0, -1.0, 1.0, -1.0]
    # 1 correct and 3 wrong answers (x 4 verdicts): w_correct = 16 / 8 = 2, w_incorrect = 16 / 24 = 2 / 3
    assert [s.weight for s in made[::4]] == pytest.approx([2.0, 2 / 3, 2 / 3, 2 / 3])
    assert advantages[:4] == pytest.approx([2.0, -2.0, 2.0, -2.0], abs=1e-5)  # std-normalised ±1, times w
    assert advantages[4:8] == [0.0] * 4 and advantages[12:] == [0.0] * 4  # unanimous answers: no gradient
    third = 2 / 3 * torch.tensor([-1.0, -1.0, -1.0, 3.0]) / torch.tensor([-1.0, -1.0, -1.0, 3.0]).std(unbiased=False)
    assert advantages[8:12] == pytest.approx(third.tolist(), abs=1e-5)  # 3 'correct' on a wrong answer, 1 'incorrect'


def test_with_balanced_weights_the_push_towards_either_verdict_cancels_whatever_the_class_mix():
    """Σ_i A_i (1[v_i = correct] − p) over a batch is the gradient on a shared logit of 'correct' (p = P(correct)):
    averaged over the verdicts a coin (p = 1/2) draws, it is 0 for any number of correct answers."""
    for correct in (1, 2, 3):
        truths = ["correct"] * correct + ["incorrect"] * (6 - correct)
        total = 0.0
        for combo in itertools.product(["correct", "incorrect"], repeat=2):  # two verdicts per answer,
            _, advantages = _verdict_samples([list(combo)] * 6, truths, 2)  # the same on every answer
            total += sum(a * ((v == "correct") - 0.5) for a, v in zip(advantages, list(combo) * 6))
        assert total == pytest.approx(0.0, abs=1e-6)
        per_answer = []  # with one answer contested, its class alone moves the logit, towards its truth
        for j in range(6):
            verdicts = [["correct"] * 2 for _ in truths]
            verdicts[j] = ["correct", "incorrect"]
            _, advantages = _verdict_samples(verdicts, truths, 2)
            per_answer.append(advantages[2 * j])  # the advantage of saying 'correct' on answer j
        assert all((a > 0) == (t == "correct") for a, t in zip(per_answer, truths))
        assert sum(per_answer) == pytest.approx(0.0, abs=1e-5)  # the classes' pulls balance


def test_one_verdict_per_answer_keeps_one_group_per_critic_and_the_balanced_reward():
    made, _ = _verdict_samples([["correct"], ["correct"], ["incorrect"]], ["correct", "incorrect", "incorrect"], 1)
    assert {s.group for s in made} == {"critic:c0"} and [s.weight for s in made] == [1.0] * 3
    assert [s.reward for s in made] == pytest.approx([1.5, -0.75, 0.75])


def test_rewards_are_balanced_per_critic_not_over_the_step():
    from evolora.critic import score_reviews

    reviews = [
        Review("c0", "s0", 0, 0, "correct", "correct", ""),
        Review("c0", "s0", 0, 1, "incorrect", "correct", ""),
        Review("c1", "s1", 1, 0, "correct", "correct", ""),
        Review("c1", "s1", 1, 1, "incorrect", "correct", ""),
        Review("c1", "s1", 1, 2, "incorrect", "correct", ""),
        Review("c1", "s1", 1, 3, "incorrect", "correct", ""),
    ]
    rewards, weights = score_reviews(reviews, RewardConfig())
    assert rewards == pytest.approx([1.0, -1.0, 2.0, -2 / 3, -2 / 3, -2 / 3]) and sum(rewards[2:]) == pytest.approx(0)
    assert weights == pytest.approx([1.0, 1.0, 2.0, 2 / 3, 2 / 3, 2 / 3])


def test_pick_reviews_keeps_both_classes_and_the_limit():
    import numpy as np

    from evolora.critic import pick_reviews

    truths = ["incorrect"] * 20 + ["correct"] * 3
    for seed in range(5):
        kept = pick_reviews(truths, 8, np.random.default_rng(seed))
        assert len(kept) == 8 == len(set(kept)) and kept == sorted(kept)
        assert sum(truths[i] == "correct" for i in kept) == 3  # all 3 correct ones, 5 wrong to fill
    kept = pick_reviews(["correct"] * 10 + ["incorrect"] * 10, 6, np.random.default_rng(0))
    assert sum(i < 10 for i in kept) == 3
    assert pick_reviews(truths, None, np.random.default_rng(0)) == list(range(23))
    assert pick_reviews(truths[:5], 8, np.random.default_rng(0)) == list(range(5))
    assert pick_reviews(truths, 8, np.random.default_rng(3)) == pick_reviews(truths, 8, np.random.default_rng(3))


def test_review_rates_are_balanced_so_a_constant_critic_scores_one_half():
    reviews = [
        Review("c0", "s0", 0, k, truth, "incorrect", "") for k, truth in enumerate(["correct"] + ["incorrect"] * 9)
    ]
    assert review_rates(reviews) == {("s0", "c0"): 0.5}  # agreement 0.9, balanced accuracy 0.5


@pytest.mark.parametrize(
    ("sections", "words"),
    [
        ({"selfplay": {"review": {"samples": 0}}}, ["selfplay.review.samples", "greater than or equal to 1"]),
        ({"selfplay": {"review": {"reviews": 1}}}, ["selfplay.review.reviews", "greater than or equal to 2"]),
        ({"selfplay": {"review": {"entropy": -0.1}}}, ["selfplay.review.entropy", "greater than or equal to 0"]),
    ],
)
def test_bad_verdict_counts_are_refused_with_the_key(sections, words):
    with pytest.raises(ConfigError) as caught:
        _config(**sections)
    assert all(word in str(caught.value) for word in words), str(caught.value)


def test_a_run_with_k_verdicts_reviews_each_picked_answer_k_times(tmp_path, single_thread):
    config = _config(
        run={"steps": 2},
        selfplay={"review": {"samples": 3, "reviews": 4}, "rewards": {"refuted": -0.3, "survived": 0.6}},
    )
    _run(config, tmp_path)
    metrics, matches = _records(tmp_path)
    for record in metrics:
        step = [m for m in matches if m["step"] == record["step"]]
        per_answer = {}
        for g, match in enumerate(step):
            for review in match["reviews"]:
                per_answer.setdefault((review["critic"], g, review["attempt"]), []).append(review)
        assert per_answer and all(len(v) == 3 for v in per_answer.values())
        critics = {c for c, _, _ in per_answer}
        assert all(sum(c == critic for c, _, _ in per_answer) <= 4 for critic in critics)
        critic = record["critic"]
        assert critic["reviews"] == 3 * len(per_answer)
        contested = sum(len({r["verdict"] for r in v}) > 1 for v in per_answer.values())
        assert critic["contested"] == pytest.approx(contested / len(per_answer))
        differ = sum(
            len({r["verdict"] == r["truth"] for r in v}) > 1 for v in per_answer.values()
        )  # format = wrong (-1)
        assert 0 < differ <= contested
        assert sum(record["trained_samples"][c] for c in critics) == 3 * differ  # equal rewards train nothing
        for critic_id in critics:  # each critic's rewards are balanced: mean = its own TPR + TNR - 1
            mine = [r for v in per_answer.values() for r in v if r["critic"] == critic_id]
            truths = {r["truth"] for r in mine}
            if len(truths) == 2:
                tpr = [r["verdict"] == "correct" for r in mine if r["truth"] == "correct"]
                tnr = [r["verdict"] == "incorrect" for r in mine if r["truth"] == "incorrect"]
                mean = sum(r["reward"] for r in mine) / len(mine)
                nones = [r for r in mine if r["verdict"] is None]
                if not nones:
                    assert mean == pytest.approx(sum(tpr) / len(tpr) + sum(tnr) / len(tnr) - 1)
        for g, match in enumerate(step):  # survival bonuses are averaged over the k verdicts
            base = [{"correct": 1.0, "wrong": -0.5}[grade] for grade in match["grades"]]
            for review in match["reviews"]:
                base[review["attempt"]] += (
                    survival_bonus(review["verdict"], review["truth"], config.selfplay.rewards) / 3
                )
            assert match["student_rewards"] == pytest.approx(base)


def test_the_entropy_bonus_sums_to_zero_per_critic_spares_constants_and_favours_the_rarer_verdict():
    import math

    from evolora.critic import entropy_bonuses

    reviews = [Review("c0", "s0", 0, i, "correct", v, "") for i, v in enumerate(["correct"] * 6 + ["incorrect"] * 2)]
    reviews += [Review("c1", "s1", 1, i, "incorrect", v, "") for i, v in enumerate(["incorrect"] * 3 + [None])]
    bonuses = entropy_bonuses(reviews, 0.5)
    assert sum(bonuses[:8]) == pytest.approx(0.0, abs=1e-12) and bonuses[8:] == [0.0] * 4  # c1: constant, format 0
    entropy = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert bonuses[0] == pytest.approx(0.5 * (-math.log(0.75) - entropy)) and bonuses[7] > 0 > bonuses[0]
    assert entropy_bonuses(reviews, 0.0) == [0.0] * 12
    # a critic saying 'correct' 15 times of 16: on the one contested (wrong) answer, 'incorrect' gains more
    verdicts = [["correct"] * 4, ["correct"] * 4, ["correct"] * 4, ["correct"] * 3 + ["incorrect"]]
    truths = ["correct", "correct", "incorrect", "incorrect"]
    _, plain = _verdict_samples(verdicts, truths, 4)
    _, bonus = _verdict_samples(verdicts, truths, 4, beta=0.5)
    assert plain[:12] == bonus[:12] == [0.0] * 12  # unanimous answers: still no gradient
    assert bonus[15] > plain[15] > 0 > plain[12] > bonus[12]
    verdicts[3] = ["incorrect"] * 3 + ["correct"]  # a contested correct answer, 'correct' 13 of 16 verdicts
    _, plain = _verdict_samples(verdicts, ["correct", "correct", "incorrect", "correct"], 4)
    _, bonus = _verdict_samples(verdicts, ["correct", "correct", "incorrect", "correct"], 4, beta=0.5)
    assert 0 < bonus[15] < plain[15]  # 'correct' is the common verdict (13 of 16): its gain shrinks


def test_without_the_std_a_critic_group_keeps_the_size_of_its_reward_differences():
    verdicts = [["correct"] * 4, ["correct"] * 4, ["correct"] * 4, ["correct"] * 3 + ["incorrect"]]
    truths = ["correct", "correct", "incorrect", "incorrect"]
    made, plain = _verdict_samples(verdicts, truths, 4, std=False)
    assert all(s.centred for s in made) and plain[:12] == [0.0] * 12
    # the wrong answer's group: rewards -1, -1, -1, +1, mean -0.5; w_incorrect = 16 / 16 = 1
    assert plain[12:] == pytest.approx([-0.5, -0.5, -0.5, 1.5])
    _, bonus = _verdict_samples(verdicts, truths, 4, beta=0.5, std=False)
    import math

    gap = 0.5 * (math.log(15) - math.log(1))  # -log q(incorrect) + log q(correct), q = 1/16, 15/16
    assert bonus[15] - bonus[12] == pytest.approx(2.0 + gap, abs=1e-5)  # the bonus keeps its size
    made, _ = _verdict_samples([["correct"]], ["correct"], 1, std=False)
    assert made[0].centred and made[0].group == "critic:c0"
    made, _ = _verdict_samples([["correct"] * 2], ["correct"], 2)
    assert not made[0].centred


def test_verdict_scores_are_the_teacher_forced_log_odds_of_the_two_verdicts(tiny):
    from bank_helpers import random_bank

    from evolora.critic.evaluation import VERDICT_WORDS, verdict_scores
    from evolora.generation.rollout import chat_prompt
    from evolora.generation.routed import BASE
    from evolora.learner import Sample, completion_logprobs

    model, tokenizer = tiny
    bank = random_bank(model, ["c0"], target_modules=("q_proj", "v_proj"), b_std=0.5)
    task = ToyTask()
    reviews = [("1 + 1", "2"), ("3 * 3", "The answer is 8.")]
    scores = verdict_scores(bank, tokenizer, task, {BASE: "base", "c0": "c0"}, reviews, batch_size=3)
    prompt = tuple(chat_prompt(tokenizer, task.critic_prompt(*reviews[1]), task.critic_prefix))
    with torch.no_grad(), bank.model.disable_adapter():  # the base model, by PEFT, not by the router
        logp = [
            float(
                completion_logprobs(
                    bank.model, [Sample(prompt, tuple(tokenizer(w, add_special_tokens=False)["input_ids"]), 0.0, "")]
                )[0].sum()
            )
            for pair in VERDICT_WORDS
            for w in pair
        ]
    expected = torch.logsumexp(torch.tensor(logp[:2]), 0) - torch.logsumexp(torch.tensor(logp[2:]), 0)
    assert scores["base"][1] == pytest.approx(float(expected), abs=1e-4)
    assert scores["c0"] != pytest.approx(scores["base"], abs=1e-6)  # the adapter changes the judge
    from evolora.critic.evaluation import auc

    assert auc([0.3, 0.1], ["correct", "incorrect"]) == 1.0 and auc([0.1], ["correct"]) is None


def test_rescoring_a_finished_run_reproduces_its_held_out_critic_evaluation(tmp_path, single_thread):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("critic_rescore", Path("benchmarks/critic_rescore.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = _config(run={"steps": 1}, eval={"limit": 2, "critic_limit": 2, "critic_samples": 2})
    summary = _run(config, tmp_path).finish()
    model, tokenizer = load_base("tiny-random")
    again = module.rescore(tmp_path, model, tokenizer, task=judged_toy())
    assert set(again["judges"]) == set(summary["critic_eval"]["judges"])
    for judge, row in summary["critic_eval"]["judges"].items():  # the run's verdicts, read back from final/
        assert again["judges"][judge] == pytest.approx(row), judge
    assert again["answerers"] == summary["critic_eval"]["answerers"]
