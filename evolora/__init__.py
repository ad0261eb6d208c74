"""evolora: population-based self-play for LLMs, with LoRA adapters as genomes.

Implements PopuLoRA (Castanyer et al., "Co-Evolving LLM Populations for Reasoning
Self-Play", arXiv 2605.16727): many LoRA adapters on one frozen base model play the
roles of teachers and students, improve by gradient RL, and evolve in LoRA weight space.

The public API, imported on first use (``import evolora`` stays light)::

    from evolora import Run, load_config

    config = load_config("tasks/arith.yaml", ["run.steps=5"])
    run = Run(config, "runs/demo")
    run.train()
    summary = run.finish()
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from evolora._version import __version__

_EXPORTS = {
    "Run": "evolora.run",
    "Config": "evolora.config",
    "ConfigError": "evolora.config",
    "load_config": "evolora.config",
    "load_run_config": "evolora.config",
    "config_from_dict": "evolora.config",
    "AdapterBank": "evolora.bank.local",
    "Individual": "evolora.population",
    "Population": "evolora.population",
    "Bank": "evolora.bank",
    "League": "evolora.league",
    "Ratings": "evolora.ratings",
    "evolve": "evolora.evolution",
    "Birth": "evolora.evolution",
    "study_plan": "evolora.study",
    "load_base": "evolora.model",
    "make_task": "evolora.tasks",
    "REGISTRY": "evolora.operators",
}
"""Public name -> the module that defines it."""

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # what IDEs and type checkers see; at run time __getattr__ imports on first use
    from evolora.bank import Bank
    from evolora.bank.local import AdapterBank
    from evolora.config import Config, ConfigError, config_from_dict, load_config, load_run_config
    from evolora.evolution import Birth, evolve
    from evolora.league import League
    from evolora.model import load_base
    from evolora.operators import REGISTRY
    from evolora.population import Individual, Population
    from evolora.ratings import Ratings
    from evolora.run import Run
    from evolora.study import study_plan
    from evolora.tasks import make_task


def __getattr__(name: str) -> Any:
    """Import a public name on first access (PEP 562); AttributeError for anything else."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'evolora' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
