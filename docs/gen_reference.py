"""Generate the configuration and command-line reference pages from the code.

    python docs/gen_reference.py          # writes docs/reference/config.md and docs/reference/cli.md

The pages are committed; ``tests/test_docs.py`` regenerates them and fails when they differ, so
the reference cannot go stale. Config keys, types, defaults and allowed values come from the
pydantic models (:class:`evolora.config.Config`) and their field docstrings; the CLI page from
the typer app's own help.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel

DOCS = Path(__file__).resolve().parent


def config_rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) for every leaf key of ``model``, sections recursed into."""
    rows = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows += config_rows(annotation, f"{key}.")
            continue
        default = field.default if field.default_factory is None else field.default_factory()
        rows.append((key, _type_name(annotation), _show(default), " ".join((field.description or "").split())))
    return rows


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


def config_page() -> str:
    """The Markdown of docs/reference/config.md."""
    from evolora.config import Config

    lines = ["# Configuration reference", "",
             "Every key of a run config (`tasks/*.yaml`, `--set key=value`), generated from the pydantic models",
             "of `evolora.config` by `docs/gen_reference.py`. Unknown keys, wrong types and values outside the",
             "allowed ones are refused with exit code 2 before any model loads.", "",
             "| key | type / allowed values | default | meaning |", "|---|---|---|---|"]
    for key, kind, default, text in config_rows(Config):
        cell = lambda s: s.replace("|", "\\|")  # noqa: E731
        lines.append(f"| `{key}` | `{cell(kind)}` | `{cell(default)}` | {cell(text)} |")
    return "\n".join(lines) + "\n"


def cli_page() -> str:
    """The Markdown of docs/reference/cli.md: each command's ``--help``, 100 columns wide."""
    import typer
    from typer.testing import CliRunner

    from evolora.cli import app

    runner = CliRunner()
    names = sorted(typer.main.get_command(app).commands)
    lines = ["# Command-line reference", "", "Generated from the typer app (`evolora COMMAND --help`) by `docs/gen_reference.py`.", ""]
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
