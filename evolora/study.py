"""A study: every seed × arm of one config, resumable, then the comparison report.

    plan = study_plan("tasks/arith.yaml", seeds=[0, 1, 2], arms=["population", "single_agent"],
                      out="runs/study-arith")
    for item in plan: ...            # item.state is "done", "resume" or "new"

An arm is a named set of config overrides. The built-in arms (:data:`BUILTIN_ARMS`) are the
population (PopuLoRA), the single agent (AZR baseline, one adapter: the rollouts of one teacher
per step), ``single_agent_total`` (the single agent matched on the population's total compute: it
proposes as many problems per step as all teachers together), ``no_evolution`` (the population
with the outer loop off: plain multi-adapter RL), ``independent_pairs`` (teacher i only ever meets
student i and nothing evolves: population size without cross-play) and ``random_reward`` (the
population trained on each group's real rewards shuffled among its samples: the same trained
samples, no signal). A config adds its own under ``study.arms``::

    study:
      arms:
        truncation: {evolution.selection: {name: truncation}}

Run directories are ``OUT/<arm>-s<seed>/``. A finished one (``final/summary.json``) is
skipped, a started one is resumed from its newest checkpoint with its own stored config,
any other starts afresh. The CLI (``evolora study``) runs the plan in this process, one run after another,
then writes the ``compare`` report over all of them.

Source: PopuLoRA (arXiv 2605.16727) §4 (population vs single agent, several seeds).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal, Mapping

from evolora.config import Config, ConfigError, load_config, load_run_config

BUILTIN_ARMS: Mapping[str, dict[str, Any]] = {
    "population": {"selfplay.mode": "population"},
    "single_agent": {"selfplay.mode": "single_agent"},
    "single_agent_total": {"selfplay.mode": "single_agent"},  # + the proposals of every teacher (total_compute)
    "no_evolution": {"selfplay.mode": "population", "evolution.enabled": False},
    "independent_pairs": {
        "selfplay.mode": "population",
        "selfplay.matchmaking.scheme": "fixed_pairs",
        "evolution.enabled": False,
    },
    "random_reward": {"selfplay.mode": "population", "learner.rewards": "permuted"},
}
"""The built-in arms: name -> the overrides that make a run of it from the study's config."""


def total_compute(config: Config) -> dict[str, Any]:
    """The overrides that give a single agent the population's rollouts per step: it proposes
    ``proposals_per_teacher × teachers`` problems of the study's config (each solved
    ``samples_per_problem`` times), as all teachers together do."""
    per_step = config.selfplay.proposals_per_teacher * config.population.teachers
    return {"selfplay.proposals_per_teacher": per_step}


ARMS = tuple(BUILTIN_ARMS)
"""The names of the built-in arms."""

_ARM_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass(frozen=True)
class StudyRun:
    """One run of a study.

    Attributes:
        arm: the arm's name (a built-in one or one of ``study.arms``).
        seed: ``run.seed``.
        out: its run directory, ``OUT/<arm>-s<seed>``.
        config: the validated config it runs with (its stored one when resumed).
        state: "done" (finished: skipped), "resume" (started) or "new".
    """

    arm: str
    seed: int
    out: Path
    config: Config
    state: Literal["done", "resume", "new"]


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` or ``"0-2"`` → [0, 1, 2].

    Args:
        text: comma-separated seeds (whole numbers >= 0) and inclusive ranges ``low-high`` with
            ``low <= high``, e.g. ``"3, 5-6"``.

    Returns:
        The seeds in the order given, ranges expanded.

    Raises:
        ConfigError: not a comma list of whole numbers >= 0 or ranges, a descending range, or a
            seed repeated.
    """
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high) if high else int(low)
        except ValueError:
            raise ConfigError(f"--seeds expects whole numbers such as 0,1,2 or 0-2, got {text!r}") from None
        if last < first:
            raise ConfigError(f"--seeds: a range must ascend (low-high with low <= high), got {part.strip()!r}")
        seeds += range(first, last + 1)
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds must list distinct seeds, got {text!r}")
    return seeds


def parse_arms(text: str) -> list[str]:
    """``"population,single_agent"`` → the list of names (which arms exist is checked by
    :func:`study_plan`, once the config's own arms are known).

    Raises:
        ConfigError: an empty list, a repeated name, or a name that is not an identifier.
    """
    arms = [a.strip() for a in text.split(",") if a.strip()]
    bad = [a for a in arms if not _ARM_NAME.fullmatch(a)]
    if not arms or bad or len(set(arms)) != len(arms):
        raise ConfigError(f"--arms takes distinct names such as {','.join(ARMS)}, got {text!r}")
    return arms


def arm_overrides(arm: str, user_arms: Mapping[str, Mapping[str, Any]], base: Config | None = None) -> list[str]:
    """The ``--set`` overrides that make a run of ``arm``, ``study.arm`` included.

    Args:
        arm: a built-in name (:data:`BUILTIN_ARMS`) or a key of ``user_arms``.
        user_arms: the config's ``study.arms``: name -> {dotted key: value}.
        base: the study's config; ``single_agent_total`` needs it (:func:`total_compute`).

    Returns:
        ``key=<JSON value>`` strings, one per override of the arm, then ``study.arm=<arm>``.

    Raises:
        ConfigError: an unknown arm, a user arm that redefines a built-in one or whose name is
            not an identifier, or ``single_agent_total`` without ``base``.
    """
    clash = sorted(set(user_arms) & set(BUILTIN_ARMS))
    if clash:
        raise ConfigError(f"study.arms: {', '.join(clash)} is a built-in arm; give your arm another name")
    bad = [name for name in user_arms if not _ARM_NAME.fullmatch(name)]
    if bad:
        raise ConfigError(f"study.arms: arm names are identifiers such as tournament_k4, got {bad[0]!r}")
    arms = {**BUILTIN_ARMS, **user_arms}
    if arm not in arms:
        raise ConfigError(
            f"--arms: unknown arm {arm!r}; built-in: {', '.join(ARMS)}; "
            f"the config's study.arms: {', '.join(user_arms) or 'none'}"
        )
    overrides = dict(arms[arm])
    if arm == "single_agent_total":
        if base is None:
            raise ConfigError("single_agent_total is matched on the study config's compute: pass its config")
        overrides.update(total_compute(base))
    return [f"{key}={json.dumps(value)}" for key, value in overrides.items()] + [f"study.arm={arm}"]


def study_plan(
    config_path: str | Path, *, seeds: list[int], arms: list[str], out: str | Path, overrides: list[str] = ()
) -> list[StudyRun]:
    """Every (arm, seed) run with its validated config and state, arms in the given order.

    All configs are validated before anything runs, so a bad key fails the study at once.

    Args:
        config_path: the study's config file (YAML).
        seeds: the ``run.seed`` of each run of every arm.
        arms: arm names, built-in (:data:`BUILTIN_ARMS`) or of the config's ``study.arms``.
        out: the study directory; each run's is ``out/<arm>-s<seed>``.
        overrides: ``key=value`` overrides applied to every run, before the arm's own.

    Returns:
        One :class:`StudyRun` per (arm, seed), arm-major: every seed of the first arm, in the
        order of ``seeds``, then the next arm.

    Raises:
        ConfigError: an invalid config or override (for any arm), an unknown arm (see
            :func:`arm_overrides`), or a resumable run whose stored config no longer validates.
    """
    out = Path(out)
    base = load_config(config_path, list(overrides))
    plan = []
    for arm in arms:
        arm_set = arm_overrides(arm, base.study.arms, base)
        for seed in seeds:
            run_dir = out / f"{arm}-s{seed}"
            if (run_dir / "final" / "summary.json").is_file():
                state = "done"
            elif (run_dir / "config.yaml").is_file():
                state = "resume"  # from its newest checkpoint, or from step 0 when it has none
            else:
                state = "new"
            if state == "new":
                config = load_config(config_path, [*overrides, *arm_set], seed=seed)
            else:
                config = load_run_config(run_dir)
            plan.append(StudyRun(arm, seed, run_dir, config, state))
    return plan


STUDY_KS = (1, 4, 16)
"""The k of a study's sampled pass@k (``evolora study --samples``)."""


def study_pass_at_k(
    plan: list[StudyRun], samples: int, ks: tuple[int, ...] = STUDY_KS, say: Callable[[str], None] | None = None
) -> list[Path]:
    """Sampled pass@k (:func:`evolora.evaluation.sampled.sampled_pass_at_k`, temperature 1.0) of every
    finished run of ``plan`` that has none with ``samples`` answers per problem yet.

    The base is sampled once per task, task parameters, held-out limit, model name, model dtype and
    ``eval.max_new_tokens``, and copied into the other runs' records with the same ones (it draws the
    same answers in every run).

    Args:
        plan: the study's runs (:func:`study_plan`); those without ``final/summary.json`` are skipped.
        samples: n sampled answers per problem and member (>= 1).
        ks: the k reported; those larger than ``samples`` are left out.
        say: told each run evaluated (one line), or None.

    Returns:
        The run directories evaluated now, in plan order.

    Raises:
        ValueError: ``samples`` < 1 or no k in 1..samples (before any run is sampled); from
            :func:`~evolora.evaluation.sampled.sampled_pass_at_k`: a run without held-out data, or
            whose ``final/`` is older than its newest checkpoint (:class:`~evolora.run_dir.StaleFinal`).
        FileNotFoundError: a finished run's adapter directory is missing.
    """
    from evolora.evaluation.sampled import check_options, sampled_pass_at_k

    check_options(samples, 1.0, ks)
    done, bases = [], {}
    finished = [item for item in plan if (item.out / "final" / "summary.json").is_file()]
    for item in finished:  # bases already sampled in this study
        record = json.loads((item.out / "final" / "summary.json").read_text()).get("pass_at_k")
        if record and record["samples"] == samples and "base" in record["members"]:
            bases.setdefault(_base_key(item.config, record["limit"]), record["members"]["base"])
    for item in finished:
        record = json.loads((item.out / "final" / "summary.json").read_text()).get("pass_at_k")
        if record and record["samples"] == samples:
            continue
        key = _base_key(item.config, item.config.eval.limit)
        record = sampled_pass_at_k(item.out, samples=samples, ks=ks, base=bases.get(key))
        bases.setdefault(key, record["members"]["base"])
        done.append(item.out)
        if say is not None:
            say(f"sampled pass@k ({samples} per problem): {item.out}")
    return done


def _base_key(config: Config, limit: int) -> str:
    """What makes two runs' base samples the same: task and its parameters, items, model and dtype."""
    return json.dumps(
        [
            config.task.name,
            config.task.params,
            limit,
            config.model.name,
            config.model.dtype,
            config.eval.max_new_tokens,
        ],
        sort_keys=True,
        default=str,
    )
