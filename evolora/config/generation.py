"""The ``generation`` section of a config: which engine generates the rollouts
(:mod:`evolora.generation.engine`), checked when the config loads, before any model does.
Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-3 (the rollouts)."""

from __future__ import annotations

import importlib.util
from typing import Literal

from evolora.config.types import _Section

GRAPH_MODULE = "evolora.generation.graph"
"""The module of the graph engine's decoder (:class:`evolora.generation.engine.GraphEngine`)."""

LEGACY_ROUTING = {"routed": "eager", "peft": "peft"}
"""``selfplay.routing`` of configs written before ``generation.engine`` -> the engine it named."""


class GenerationConfig(_Section):
    engine: Literal["auto", "eager", "graph", "peft"] = "auto"
    """The engine of every rollout (:mod:`evolora.generation.engine`): ``eager`` (routed LoRA in an
    eager decode loop: every row through its own adapter in one pass), ``graph`` (the same with a
    static KV cache and a captured CUDA-graph decode step; CUDA only), ``peft`` (``transformers``'
    ``generate`` with PEFT's ``adapter_names``, the reference); ``auto``: graph on CUDA, else eager."""


def graph_installed() -> bool:
    """Whether :data:`GRAPH_MODULE` (the graph engine's decoder) is importable."""
    return importlib.util.find_spec(GRAPH_MODULE) is not None


def check_engine(generation: GenerationConfig, device: str) -> None:
    """Refuse ``generation.engine: graph`` where it cannot run, before any model loads.

    Args:
        generation: the section; device: ``model.device`` as written (``auto``, ``cpu``, ``cuda[:N]``).

    Raises:
        ValueError: ``graph`` with ``model.device: cpu``, or without :data:`GRAPH_MODULE` installed
            (whether torch sees a GPU is checked with the device, before the model loads).
    """
    if generation.engine != "graph":
        return
    if device == "cpu":
        raise ValueError("generation.engine=graph needs a CUDA device, but model.device=cpu; "
                         "set generation.engine=auto or eager")
    if not graph_installed():
        raise ValueError(f"generation.engine=graph needs {GRAPH_MODULE}, which this install lacks; "
                         "set generation.engine=auto or eager")


def migrate_routing(data: dict) -> dict:
    """``data`` (a raw config mapping) with a stored ``selfplay.routing`` moved to ``generation.engine``
    (:data:`LEGACY_ROUTING`), so run directories written before the engine key still load; a
    ``generation.engine`` already there wins. Other values are left for validation to name."""
    selfplay = data.get("selfplay")
    if not isinstance(selfplay, dict) or selfplay.get("routing") not in LEGACY_ROUTING:
        return data
    data = {**data, "selfplay": {k: v for k, v in selfplay.items() if k != "routing"}}
    generation = data.get("generation")
    if generation is None or isinstance(generation, dict):
        data["generation"] = {"engine": LEGACY_ROUTING[selfplay["routing"]], **(generation or {})}
    return data
