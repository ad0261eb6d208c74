"""Generate the configuration and command-line reference pages from the code.

    python docs/gen_reference.py          # writes docs/reference/config.md and docs/reference/cli.md

The pages are committed; ``tests/test_docs.py`` regenerates them and fails when they differ, so
the reference cannot go stale. Config keys, types, defaults and allowed values come from the
pydantic models (:class:`evolora.config.Config`) and their field docstrings; the CLI page from
the typer app's own help.
"""

from __future__ import annotations

import inspect
import re
import sys
import types
import typing
from pathlib import Path

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel

DOCS = Path(__file__).resolve().parent


def config_rows(
    model: type[BaseModel], prefix: str = "", instance: BaseModel | None = None
) -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) for every leaf key of ``model``, sections recursed into;
    ``instance``: the section's default value, whose fields override the class defaults (e.g.
    ``evolution.selection`` defaults to ``{name: tournament}`` while ``OperatorChoice.name`` has none)."""
    rows = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            value = getattr(instance, name) if instance is not None else field.default
            rows += config_rows(annotation, f"{key}.", value if isinstance(value, BaseModel) else None)
            continue
        section = _mapped_section(annotation)
        if section is not None:  # a mapping name -> section (selfplay.roles): its defaults, then the section's keys
            default = field.default_factory() if field.default_factory is not None else field.default
            rows.append(
                (key, f"dict[str, {section.__name__}]", _show_sections(default), _plain(field.description or ""))
            )
            rows += config_rows(section, f"{key}.<name>.")
            continue
        if instance is not None:
            default = getattr(instance, name)
        else:
            default = field.default if field.default_factory is None else field.default_factory()
        kind = " ".join(filter(None, [_type_name(annotation), _bounds(field.metadata)]))
        rows.append((key, kind, _show(default), _plain(field.description or "")))
    return rows


def _mapped_section(annotation) -> type[BaseModel] | None:
    """The section type ``S`` of a ``dict[str, S]`` annotation; None for any other."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is dict and len(args) == 2:
        value = args[1]
        if isinstance(value, type) and issubclass(value, BaseModel):
            return value
    return None


def _show_sections(value: dict) -> str:
    """A mapping of sections by the keys each was given (the rest are the section's defaults):
    ``{teacher: {max_new_tokens: 160}, ...}``."""
    parts = []
    for name, section in value.items():
        own = section.model_dump(include=section.model_fields_set)
        parts.append(f"{name}: {{{', '.join(f'{k}: {_show(v)}' for k, v in own.items())}}}")
    return "{" + ", ".join(parts) + "}"


_BOUNDS = ((Ge, "ge", "≥"), (Gt, "gt", ">"), (Le, "le", "≤"), (Lt, "lt", "<"))


def _bounds(metadata: list) -> str:
    """The numeric bounds of a field, e.g. ``> 0, ≤ 1`` for ``Field(gt=0, le=1)``; empty when none."""
    parts = [
        f"{sign} {getattr(item, attr)}" for item in metadata for kind, attr, sign in _BOUNDS if isinstance(item, kind)
    ]
    return ", ".join(parts)


def _type_name(annotation) -> str:
    """A readable type: ``int``, ``'grpo' | 'dr_grpo'``, ``tuple[str, ...] | 'all-linear'``, ``float | None``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in args)
    if origin is typing.Literal:
        return " | ".join(repr(arg) for arg in args)
    if origin in (tuple, list, dict):
        inner = ", ".join("..." if arg is Ellipsis else _type_name(arg) for arg in args)
        return f"{origin.__name__}[{inner}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _show(value) -> str:
    if isinstance(value, BaseModel):
        return str(value.model_dump())
    return repr(value) if isinstance(value, str) else str(value)


def operator_rows(kind: str) -> list[tuple[str, str, str, str, str]]:
    """(operator, parameter, allowed values, default, meaning) of every registered operator of
    ``kind``; the operator's own summary is on its first row."""
    from evolora.operators import REGISTRY

    rows = []
    for name in REGISTRY.names(kind, resolved=False):
        spec = REGISTRY.get(kind, name)
        params = list(spec.params.items()) or [("", None)]
        for index, (pname, param) in enumerate(params):
            summary = _plain(spec.doc) if index == 0 else ""
            if param is None:
                rows.append((name, "", "", "", summary))
                continue
            meaning = " ".join(filter(None, [summary, f"`{pname}`: {_plain(param.doc)}." if param.doc else ""]))
            rows.append((name if index == 0 else "", pname, param.allowed(), _show(param.default), meaning))
    return rows


def task_rows() -> dict[str, tuple[str, list[tuple[str, str, str, str]]]]:
    """{task name: (summary, rows)}: (key, type, default, meaning) of each registered task's
    parameters (``task.params.*``), read from its settings dataclass (``params_type``; else its
    constructor) and that one's docstring ``Args:``."""
    from evolora.tasks import TASKS
    from evolora.tasks.params import params_signature

    tasks = {}
    for name, factory in sorted(TASKS.items()):
        docs = _args_section(inspect.getdoc(getattr(factory, "params_type", None) or factory) or "")
        rows = []
        for pname, parameter in params_signature(factory).parameters.items():
            if parameter.kind not in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD):
                continue
            kind = parameter.annotation if isinstance(parameter.annotation, str) else _type_name(parameter.annotation)
            rows.append((f"task.params.{pname}", kind, _show(parameter.default), _plain(docs.get(pname, ""))))
        tasks[name] = (_plain(_first_sentence(inspect.getdoc(factory) or "")), rows)
    return tasks


def _plain(text: str) -> str:
    """Docstring text as Markdown: one line, Sphinx roles (``:mod:`x```) as code spans."""
    return re.sub(r":\w+:`~?([^`]+)`", r"`\1`", " ".join(text.split()))


def _first_sentence(text: str) -> str:
    return " ".join(text.split("\n\n")[0].split())


def _args_section(doc: str) -> dict[str, str]:
    """{parameter: text} from a Google-style ``Args:`` section; ``a, b: text`` documents both."""
    lines = doc.split("Args:", 1)[1].splitlines() if "Args:" in doc else []
    found: dict[str, list[str]] = {}
    names: list[str] = []
    for line in lines[1:]:
        if line.strip() and not line.startswith(" "):
            break  # the next section
        entry = re.match(r"^ {4}(\w[\w, ]*):(.*)$", line)
        if entry:
            names = [n.strip() for n in entry.group(1).split(",")]
            for n in names:
                found[n] = [entry.group(2).strip()]
        elif names and line.strip():
            for n in names:
                found[n].append(line.strip())
    return {n: " ".join(parts) for n, parts in found.items()}


def _table(rows, header: str) -> list[str]:
    """A Markdown table: ``header``, then one row per tuple; keys and values as code spans (a pipe in
    a code span does not split the cell, so it stays unescaped; one in the text is escaped)."""
    cell = lambda s: s.replace("|", "\\|")  # noqa: E731
    columns = header.count("|") - 1
    lines = [header, "|" + "---|" * columns]
    for row in rows:
        *codes, text = row
        lines.append("| " + " | ".join(f"`{c}`" if c else "" for c in codes) + f" | {cell(text)} |")
    return lines


def config_page() -> str:
    """The Markdown of docs/reference/config.md."""
    from evolora.config import Config

    lines = [
        "# Configuration reference",
        "",
        "Every key of a run config (`tasks/*.yaml`, `--set key=value`), generated from the pydantic models",
        "of `evolora.config`, the operator registry and the task constructors by `docs/gen_reference.py`.",
        "Unknown keys, wrong types and values outside the allowed ones are refused with exit code 2 before",
        "any model loads.",
        "",
        "## Sections",
        "",
    ]
    lines += _table(config_rows(Config), "| key | type / allowed values | default | meaning |")
    lines += [
        "",
        "## Operators",
        "",
        "`evolution.selection`, `evolution.crossover` and `evolution.mutation` each take `{name, params}`:",
        "`name` is one of the operators below and `params` holds its parameters, e.g.",
        "`{name: tournament, params: {k: 4}}` (`evolora operators` prints the same table). A function of",
        "your own is named `package.module:function`; its keyword-only arguments with defaults are its",
        "parameters ([tutorial](../tutorials/custom-operator.md)).",
    ]
    for kind in ("selection", "crossover", "mutation"):
        lines += ["", f"### evolution.{kind}", ""]
        lines += _table(operator_rows(kind), "| name | parameter | allowed values | default | meaning |")
    lines += ["", "## Tasks", "", "`task.params` holds the keyword arguments of the task named by `task.name`."]
    for name, (summary, rows) in task_rows().items():
        lines += ["", f"### task.name: {name}", "", summary, ""]
        lines += _table(rows, "| key | type | default | meaning |")
    return "\n".join(lines) + "\n"


def cli_page() -> str:
    """The Markdown of docs/reference/cli.md: each command's ``--help``, 100 columns wide."""
    import typer
    from typer.testing import CliRunner

    from evolora.cli import app

    runner = CliRunner()
    names = sorted(typer.main.get_command(app).commands)
    lines = [
        "# Command-line reference",
        "",
        "Generated from the typer app (`evolora COMMAND --help`) by `docs/gen_reference.py`.",
        "",
    ]
    for name in names:
        result = runner.invoke(app, [name, "--help"], prog_name="evolora", env={"COLUMNS": "100", "TERM": "dumb"})
        text = "\n".join(line.rstrip() for line in result.output.splitlines()).strip("\n")
        lines += [f"## evolora {name}", "", "```text", text, "```", ""]
    return "\n".join(lines)


PAGES = {"reference/config.md": config_page, "reference/cli.md": cli_page}
"""Generated page (relative to docs/) -> its generator."""


def main() -> None:
    for relative, make in PAGES.items():
        path = DOCS / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(make())
        print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
