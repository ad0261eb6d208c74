"""The building blocks of every config section: the error type, strict numbers, a strict section.

Split from :mod:`evolora.config` so that section modules (:mod:`evolora.config.population`)
can share them without importing the whole config.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, StringConstraints

from evolora.model.device import DEVICE_PATTERN


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


def _thread_count(value: Any) -> Any:
    """``model.num_threads``: an int >= 1 (4.0 too), ``auto`` or null; anything else is refused in one line."""
    if value is None or value == "auto":
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == int(value) and value >= 1:
        return int(value)
    shown = f"the boolean {str(value).lower()}" if isinstance(value, bool) else repr(value)
    raise ValueError(f"expected an int >= 1, auto or null, got {shown}; e.g. 1 on a busy machine, or auto")


def _auto_bool(value: Any) -> Any:
    """``true``, ``false`` or ``auto``; YAML's other spellings (``yes``, 1) are refused."""
    if isinstance(value, bool) or value == "auto":
        return value
    raise ValueError(f"expected true, false or auto, got {value!r}")


ThreadCount = Annotated[int | Literal["auto"] | None, BeforeValidator(_thread_count)]
"""``model.num_threads``: an int >= 1, ``auto`` (:mod:`evolora.model.threads`) or None (torch's default)."""
AutoBool = Annotated[Literal["auto"] | bool, BeforeValidator(_auto_bool)]
"""A switch with an ``auto`` setting: ``true``, ``false`` or ``auto``."""


Algorithm = Literal["grpo", "dr_grpo", "reinforce_pp"]
"""``learner.algorithm``: the advantage estimator (:func:`evolora.learner.compute_advantages`)."""
LRSchedule = Literal["constant", "cosine"]
"""``learner.lr_schedule`` (:func:`evolora.schedule.scheduled_lr`)."""
Device = Annotated[str, StringConstraints(pattern=DEVICE_PATTERN)]
"""``model.device``, checked for its spelling only: whether torch sees that GPU is checked before the model loads."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True)
