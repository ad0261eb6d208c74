"""Per-role rollout settings (``selfplay.roles.<name>``) and the critics' review settings
(``selfplay.review``): roles are data, so a role of one's own is a key, not a new field.
Source: PopuLoRA (arXiv 2605.16727) §2 steps 2-3 (the rollouts); SPC (arXiv 2504.19162) (the critics)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from evolora.config.types import Float, Int, _Section

ROLE_NAME = re.compile(r"[a-z][a-z0-9_]*")
"""A role's name under ``selfplay.roles``: lower-case letters, digits and ``_`` (``teacher``, ``judge``)."""


class RoleSampling(_Section):
    """How the rollouts of one role sample: ``selfplay.roles.<name>`` (e.g. ``selfplay.roles.student``)."""

    temperature: Float | None = Field(default=None, gt=0)
    """Sampling temperature of the role's rollouts; None uses ``selfplay.temperature``. Held-out
    evaluation is greedy."""
    top_p: Float | None = Field(default=None, gt=0, le=1)
    """Nucleus mass of the role's rollouts; None uses ``selfplay.top_p``."""
    max_new_tokens: Int = Field(default=128, ge=1)
    """Token cap of each rollout of the role (teacher: a proposal, 160 by default; student: an
    answer, 128; critic: a verdict after the forced ``Verdict:``, 8)."""
    stop: tuple[str, ...] = ()
    r"""Stop strings of the role's free-form rollouts, kept like an EOS (student ``["\n"]``: one-line
    answers; teacher ``["\n"]``: one proposal line, what arith parses; critic ``["\n"]`` by default:
    a verdict line). A task's structured proposals (segments) stop as their segments say. Empty:
    EOS or the cap. Not in held-out evaluation."""

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not stop for stop in value):
            raise ValueError("an empty stop string would end every answer at once; give e.g. ['\\n'] or []")
        return value


DEFAULT_ROLES: dict[str, dict[str, Any]] = {
    "teacher": {"max_new_tokens": 160},
    "student": {"max_new_tokens": 128},
    "critic": {"max_new_tokens": 8, "stop": ("\n",)},
}
"""The settings of the built-in roles where they differ from :class:`RoleSampling`'s defaults;
a config's ``selfplay.roles.<name>`` is laid over them key by key."""


def default_roles() -> dict[str, RoleSampling]:
    """``selfplay.roles`` when a config gives none: one :class:`RoleSampling` per built-in role."""
    return {name: RoleSampling(**values) for name, values in DEFAULT_ROLES.items()}


def merge_roles(value: Any) -> Any:
    """``selfplay.roles`` as given, each built-in role's defaults filled in under the keys it
    leaves out (``{student: {stop: ["\\n"]}}`` keeps the student's 128 tokens and the teacher's
    and critic's settings). A :class:`RoleSampling` counts with the fields it was given. Anything
    but a mapping is returned unchanged, for validation to name.

    Raises:
        ValueError: a role name that is not lower-case letters, digits and ``_``.
    """
    if not isinstance(value, dict):
        return value
    bad = [name for name in value if not (isinstance(name, str) and ROLE_NAME.fullmatch(name))]
    if bad:
        raise ValueError(f"role names are lower-case identifiers such as judge, got {bad[0]!r}")
    given = {
        name: role.model_dump(exclude_unset=True) if isinstance(role, RoleSampling) else role
        for name, role in value.items()
    }
    merged = {
        name: {**values, **given[name]} if isinstance(given.get(name), dict) else given.get(name, values)
        for name, values in DEFAULT_ROLES.items()
    }
    return {**merged, **{name: role for name, role in given.items() if name not in DEFAULT_ROLES}}


class ReviewConfig(_Section):
    """How critics review the students' answers (``selfplay.review``; runs with critics only)."""

    samples: Int = Field(default=1, ge=1, le=64)
    """Verdicts k per reviewed answer (not ``eval.critic_samples``). k > 1: the k verdicts on one
    answer are a GRPO group, the advantage times the balanced class weight; a critic that says the
    same k times gets 0 (:func:`evolora.critic.verdict_sample`). 1: the critic's reviews are one group."""
    entropy: Float = Field(default=0.0, ge=0)
    """β of the marginal-verdict-entropy bonus β (−log q(v) − H(q)) on each verdict's sample reward,
    q = the critic's verdict shares in the step (:func:`evolora.critic.entropy_bonuses`); 0: off."""
    std: bool = True
    """Divide a critic group's centred rewards by their std (as every group); False: centre only
    (Dr. GRPO, arXiv 2503.20783), so ``entropy`` acts by its size, not only its sign."""
    reviews: Int | None = Field(default=None, ge=2)
    """Answers each critic reviews per step, up to half from each true class (the rest from the
    other; :func:`evolora.critic.pick_reviews`); None: every parsed answer of its student."""
