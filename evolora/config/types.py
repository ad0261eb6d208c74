"""The building blocks of every config section: the error type, strict numbers, a strict section.

Split from :mod:`evolora.config` so that section modules (:mod:`evolora.config.population`)
can share them without importing the whole config.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, StringConstraints


class ConfigError(ValueError):
    """A config is malformed; the message names the key and what to change."""


def _no_bool(value: Any) -> Any:
    """YAML reads ``true``/``false`` as bools, which pydantic would take as 1/0: refuse them."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got the boolean {str(value).lower()}; write a number such as 4")
    return value


Int = Annotated[int, BeforeValidator(_no_bool)]
"""An int config field: 4 or 4.0, never a bool."""
Float = Annotated[float, BeforeValidator(_no_bool)]
"""A float config field: finite (``_Section`` refuses NaN and Inf), never a bool."""


Algorithm = Literal["grpo", "dr_grpo", "reinforce_pp"]
"""``learner.algorithm``: the advantage estimator (:func:`evolora.learner.compute_advantages`)."""
LRSchedule = Literal["constant", "cosine"]
"""``learner.lr_schedule`` (:func:`evolora.schedule.scheduled_lr`)."""
DEVICE_PATTERN = r"^(auto|cpu|cuda(:\d+)?)$"
"""The spellings of ``model.device``: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (:mod:`evolora.model.device`)."""
Device = Annotated[str, StringConstraints(pattern=DEVICE_PATTERN)]
"""``model.device``, checked for its spelling only: whether torch sees that GPU is checked before the model loads."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True)
