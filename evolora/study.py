"""A study: every seed × arm of one config, resumable, then the comparison report.

    plan = study_plan("tasks/arith.yaml", seeds=[0, 1, 2], arms=["population", "single_agent"],
                      out="runs/study-arith")
    for item in plan: ...            # item.state is "done", "resume" or "new"

Run directories are ``OUT/<arm>-s<seed>/``. A finished one (``final/summary.json``) is
skipped, a started one is resumed from its newest checkpoint with its own stored config,
any other starts afresh. The CLI (``evolora study``) runs the plan in this process, one run after another,
then writes the ``compare`` report over all of them.

Source: PopuLoRA (arXiv 2605.16727) §4 (population vs single agent, several seeds).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from evolora.config import Config, ConfigError, load_config, load_run_config

ARMS = ("population", "single_agent")
"""The arms a study can run: the values of ``selfplay.mode``."""


@dataclass(frozen=True)
class StudyRun:
    """One run of a study.

    Attributes:
        arm: ``population`` or ``single_agent`` (``selfplay.mode``).
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

    Raises:
        ConfigError: not a comma list of whole numbers or ranges, or a seed repeated.
    """
    seeds: list[int] = []
    try:
        for part in text.split(","):
            low, _, high = part.strip().partition("-")
            seeds += list(range(int(low), int(high) + 1)) if high else [int(low)]
    except ValueError:
        raise ConfigError(f"--seeds expects whole numbers such as 0,1,2 or 0-2, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds must list distinct seeds, got {text!r}")
    return seeds


def parse_arms(text: str) -> list[str]:
    """``"population,single_agent"`` → the list, checked against :data:`ARMS`.

    Raises:
        ConfigError: an unknown or repeated arm.
    """
    arms = [a.strip() for a in text.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if not arms or unknown or len(set(arms)) != len(arms):
        raise ConfigError(f"--arms takes distinct names from {', '.join(ARMS)}, got {text!r}")
    return arms


def study_plan(config_path: str | Path, *, seeds: list[int], arms: list[str], out: str | Path,
               overrides: list[str] = ()) -> list[StudyRun]:
    """Every (arm, seed) run with its validated config and state, arms in the given order.

    All configs are validated before anything runs, so a bad key fails the study at once.

    Raises:
        ConfigError: an invalid config or override (for any arm), or a resumable run whose
            stored config no longer validates.
    """
    out = Path(out)
    plan = []
    for arm in arms:
        for seed in seeds:
            run_dir = out / f"{arm}-s{seed}"
            if (run_dir / "final" / "summary.json").is_file():
                state = "done"
            elif (run_dir / "config.yaml").is_file():
                state = "resume"  # from its newest checkpoint, or from step 0 when it has none
            else:
                state = "new"
            if state == "new":
                config = load_config(config_path, [*overrides, f"selfplay.mode={arm}"], seed=seed)
            else:
                config = load_run_config(run_dir)
            plan.append(StudyRun(arm, seed, run_dir, config, state))
    return plan
