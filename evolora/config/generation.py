"""The ``generation`` section of a config: which engine generates the rollouts
(:mod:`evolora.generation.engine`), checked when the config loads, before any model does.
Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-3 (the rollouts)."""

from __future__ import annotations

from pydantic import field_validator

from evolora.config.types import _Section
from evolora.generation.registry import AUTO, check_graph, engine_spec

LEGACY_ROUTING = {"routed": "eager", "peft": "peft"}
"""``selfplay.routing`` of configs written before ``generation.engine`` -> the engine it named."""


class GenerationConfig(_Section):
    engine: str = AUTO
    """The engine of every rollout (:mod:`evolora.generation.engine`), a name of the engine registry
    (:mod:`evolora.generation.registry`; ``evolora engines`` lists them): ``eager`` (routed LoRA in an
    eager decode loop: every row through its own adapter in one pass), ``graph`` (the same with a
    static KV cache and a captured CUDA-graph decode step; CUDA only), ``peft`` (``transformers``'
    ``generate`` with PEFT's ``adapter_names``, the reference), a user's own as ``package.module:Class``
    (imported when the config loads); ``auto``: graph on CUDA, else eager."""

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        if value != AUTO:
            engine_spec(value)  # an unknown name, or a class that does not import, is refused here
        return value


def check_engine(generation: GenerationConfig, device: str) -> None:
    """Refuse ``generation.engine: graph`` where it cannot run, before any model loads
    (:func:`evolora.generation.registry.check_graph`).

    Args:
        generation: the section; device: ``model.device`` as written (``auto``, ``cpu``, ``cuda[:N]``).

    Raises:
        ValueError: ``graph`` with ``model.device: cpu`` (whether torch sees a GPU is checked with
            the device, before the model loads).
    """
    if generation.engine == "graph":
        check_graph(None if device == "auto" else device)


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
