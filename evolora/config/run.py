"""The ``run`` section of a config: steps, seed, checkpoints, loggers and where the population runs.

``run.backend: local`` (the default) keeps the whole population in this process;
``run.backend: ray`` spreads its adapter slots over ``run.workers`` Ray actors, each with
its own base-model replica (:mod:`evolora.distributed.sharded_bank`). Checked when the config loads, before
any model does. Source: PopuLoRA (arXiv 2605.16727) §2 (one frozen base shared by every adapter).
"""

from __future__ import annotations

import importlib.util
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from evolora.config.types import Int, _Section

OPTIONAL_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}
"""Logger name -> the Python package it needs, installed by ``pip install 'evolora[NAME]'``."""


def check_loggers(names: tuple[str, ...]) -> tuple[str, ...]:
    """Validate ``run.loggers`` (a pydantic after-validator of :class:`RunConfig`).

    Args:
        names: logger names from :data:`evolora.loggers.LOGGERS`.

    Returns:
        ``names`` unchanged.

    Raises:
        ValueError: ``jsonl`` is missing (resume, ``evolora evaluate`` and reports read
            ``metrics.jsonl``), a name is given twice, or an optional package is not installed
            (the message holds the ``pip install`` command). Checked when the config loads,
            before any model does.
    """
    if "jsonl" not in names:
        raise ValueError("keep jsonl in the list (resume and reports read metrics.jsonl), e.g. [jsonl, tensorboard]")
    if len(set(names)) != len(names):
        raise ValueError("each logger may be given once")
    for name in names:
        package = OPTIONAL_PACKAGES.get(name)
        if package and importlib.util.find_spec(package) is None:
            raise ValueError(
                f"the {name} logger needs the {package} package, which is not installed; "
                f"install it with: pip install 'evolora[{name}]'"
            )
    return names


MAX_SEED = 2**63 - 1
"""The largest ``run.seed``: every seed in ``[0, MAX_SEED]`` runs (:mod:`evolora.streams` derives each
stream's seed from it), and any other integer is refused when the config loads."""


def check_seed(seed: int) -> int:
    """Validate ``run.seed`` (a pydantic after-validator of :class:`RunConfig`).

    Args:
        seed: the run seed.

    Returns:
        ``seed`` unchanged.

    Raises:
        ValueError: ``seed`` is outside ``[0, 2**63 - 1]``; the message gives the range. Checked
            when the config loads, before any model does.
    """
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"a seed is an integer in [0, 2**63 - 1] (0 to {MAX_SEED})")
    return seed


class RunConfig(_Section):
    steps: Int = Field(default=6, ge=0)
    """RL steps (self-play games + updates)."""
    seed: Annotated[Int, AfterValidator(check_seed)] = 0
    """Seed of every random draw of the run (adapter init, sampling, matchmaking, operators), an
    integer in [0, 2**63 - 1]; a run replays exactly for the same seed. ``evolora study --seeds``
    sets it per run."""
    checkpoint_every: Int = Field(default=1, ge=1)
    """Write a resumable checkpoint every N steps."""
    loggers: Annotated[tuple[Literal["jsonl", "tensorboard", "wandb"], ...], AfterValidator(check_loggers)] = ("jsonl",)
    """Step loggers (:mod:`evolora.loggers`): jsonl (always), tensorboard, wandb (pip extras of the same names)."""
    backend: Literal["local", "ray"] = "local"
    """Where the population runs: ``local`` (one process, one base model) or ``ray`` (one Ray
    actor per worker, each with its own base replica and a fixed shard of the adapter slots)."""
    workers: Int = Field(default=1, ge=1)
    """Ray workers (actors) with ``backend: ray``; slot i lives on worker i mod workers."""
    ray_address: str | None = None
    """Ray cluster to join with ``backend: ray``: None starts a local one, ``auto`` joins the
    cluster started by ``ray start --head`` on this machine, or ``ray://host:10001``."""

    @model_validator(mode="after")
    def _check_backend(self) -> RunConfig:
        if self.backend == "local":
            if self.workers > 1:
                raise ValueError(
                    f"run.workers={self.workers} needs run.backend=ray; set run.backend=ray or run.workers=1"
                )
            if self.ray_address is not None:
                raise ValueError("run.ray_address is only read with run.backend=ray; set run.backend=ray or drop it")
        elif importlib.util.find_spec("ray") is None:
            raise ValueError("run.backend=ray needs Ray, which is not installed: pip install 'evolora[ray]'")
        return self


def check_workers(run: RunConfig, slots: int, device: str = "auto") -> None:
    """Every Ray worker must own at least one adapter slot, and gets a whole GPU or none.

    Args:
        run: the run section; slots: adapter slots of the run (members plus hall-of-fame slots);
        device: ``model.device``.

    Raises:
        ValueError: ``run.workers`` exceeds ``slots`` (the message gives the largest value that
            fits), or ``model.device=cuda:N`` with ``run.backend=ray`` (Ray gives each worker its
            own GPU, which it sees as ``cuda``).
    """
    if run.backend == "ray" and device.startswith("cuda:"):
        raise ValueError(
            f"model.device={device} with run.backend=ray: Ray gives each worker its own GPU; "
            "set model.device=cuda (or auto)"
        )
    if run.backend == "ray" and run.workers > slots:
        raise ValueError(
            f"run.workers={run.workers} but the run has only {slots} adapter slots (members and "
            f"hall of fame); set run.workers <= {slots}"
        )
