"""Messages for a config that fails validation: short, one line per key, never the config itself."""

from __future__ import annotations

import typing

from pydantic import ValidationError

from evolora.config.strict_yaml import clip, short
from evolora.config.types import _Section
from evolora.spelling import did_you_mean


def _section_keys(root: type, loc: tuple) -> list[str]:
    """The keys of the config section of ``root`` (the Config model) at ``loc`` (``()`` the top level, ``("lora",)``, ...); [] when
    ``loc`` does not name a section (a free-form mapping such as ``task.params``)."""
    model: type = root
    parts = list(loc)
    while parts:
        field = model.model_fields.get(str(parts.pop(0)))
        annotation = field.annotation if field is not None else None
        if typing.get_origin(annotation) is dict and parts:  # a mapping of sections (selfplay.roles.<name>)
            annotation = typing.get_args(annotation)[1]
            parts.pop(0)
        if not (isinstance(annotation, type) and issubclass(annotation, _Section)):
            return []
        model = annotation
    return list(model.model_fields)


def format_validation_error(error: ValidationError, root: type) -> str:
    """At most 3 lines: a header and the first errors of validating ``root`` (the Config model), each naming the key, what it got (one short
    line, never the whole config) and what is allowed."""
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            known = _section_keys(root, item["loc"][:-1])
            message = (
                f"unknown key; {did_you_mean(item['loc'][-1], known)}"
                f"{'.'.join(map(str, item['loc'][:-1])) or 'a config'} takes {', '.join(known)}"
                if known
                else "unknown key; check the spelling against the documented keys"
            )
        got = item.get("input")  # a whole section or config is never echoed: the message names its keys
        lines.append(
            f"  {clip(where, 80)}: {clip(message, 160)}" + ("" if isinstance(got, dict) else f" (got {short(got, 60)})")
        )
    if len(lines) > 2:
        lines = [lines[0], f"  ... and {len(lines) - 1} more; fix the first and run again"]
    return "invalid config:\n" + "\n".join(lines)
