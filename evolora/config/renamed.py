"""Config keys that moved, read under their new names so older configs and run directories keep
loading: the flat per-role keys of ``selfplay`` (``teacher_temperature`` …) now live under
``selfplay.roles.<role>`` and the critics' review keys (``critic_samples`` …) under ``selfplay.review``.

A config (a YAML file, a run directory's ``config.yaml`` or a dict) is rewritten before
validation (:func:`rename_keys`); a ``--set`` override of an old key is applied to its new key
(:func:`rename_path`). Each load that renamed anything prints one line naming the new keys
(:func:`report_renamed`).
"""

from __future__ import annotations

import copy
import sys
from typing import TextIO

from evolora.config.types import ConfigError

_ROLE_KEYS = ("max_new_tokens", "temperature", "top_p", "stop")
_REVIEW_KEYS = ("samples", "entropy", "std", "reviews")

RENAMED: dict[str, tuple[str, ...]] = {
    **{f"{role}_{key}": ("roles", role, key) for role in ("teacher", "student", "critic") for key in _ROLE_KEYS},
    **{f"critic_{key}": ("review", key) for key in _REVIEW_KEYS},
}
"""Old key of the ``selfplay`` section -> its path under ``selfplay`` now
(``teacher_temperature`` -> ``roles.teacher.temperature``, ``critic_samples`` -> ``review.samples``)."""

Renamed = list[tuple[str, str]]
"""(old dotted key, new dotted key) pairs, e.g. ``("selfplay.critic_std", "selfplay.review.std")``."""


def rename_keys(data: dict) -> tuple[dict, Renamed]:
    """``data`` (a raw config mapping) with each old ``selfplay`` key of :data:`RENAMED` moved to
    its new place, and the pairs moved. ``data`` itself is not changed.

    Raises:
        ConfigError: an old key and its new key are both given (which one is meant is unclear), or
            the new key's section (``selfplay.roles``, ``selfplay.roles.<role>``, ``selfplay.review``)
            is given as something other than a mapping.
    """
    selfplay = data.get("selfplay")
    old = [key for key in selfplay if key in RENAMED] if isinstance(selfplay, dict) else []
    if not old:
        return data, []
    selfplay = copy.deepcopy(selfplay)
    for key in old:
        *sections, leaf = RENAMED[key]
        node, where = selfplay, "selfplay"
        for part in sections:
            where += f".{part}"
            if node.get(part) is None:  # absent, or written empty (``roles:``)
                node[part] = {}
            node = node[part]
            if not isinstance(node, dict):
                raise ConfigError(f"invalid config:\n  {where}: give a mapping (selfplay.{key} moved into it)")
        new = f"{where}.{leaf}"
        if leaf in node:
            raise ConfigError(
                f"invalid config:\n  selfplay.{key} (the old name) and {new} are both given; keep {new} only"
            )
        node[leaf] = selfplay.pop(key)
    return {**data, "selfplay": selfplay}, [(f"selfplay.{key}", f"selfplay.{'.'.join(RENAMED[key])}") for key in old]


def rename_path(path: list[str]) -> tuple[list[str], Renamed]:
    """The path a ``--set`` override of ``path`` (``["selfplay", "student_stop"]``) applies to now
    (``["selfplay", "roles", "student", "stop"]``), and the renamed pair ([] when not renamed)."""
    if len(path) == 2 and path[0] == "selfplay" and path[1] in RENAMED:
        new = ["selfplay", *RENAMED[path[1]]]
        return new, [(".".join(path), ".".join(new))]
    return path, []


def report_renamed(renamed: Renamed, stream: TextIO | None = None) -> None:
    """Print one line naming the new keys of the old ones a config used (nothing when none), e.g.
    ``note: old config keys read under their new names: selfplay.roles.teacher.{max_new_tokens,
    temperature}, selfplay.review.samples; write these``. ``stream``: stderr by default."""
    if not renamed:
        return
    groups: dict[str, list[str]] = {}
    for _, new in dict.fromkeys(renamed):
        parent, _, leaf = new.rpartition(".")
        groups.setdefault(parent, []).append(leaf)
    names = [
        f"{parent}.{leaves[0]}" if len(leaves) == 1 else f"{parent}.{{{','.join(leaves)}}}"
        for parent, leaves in groups.items()
    ]
    print(
        f"note: old config keys read under their new names: {', '.join(names)}; write these",
        file=stream or sys.stderr,
    )
