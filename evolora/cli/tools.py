"""The command line's standalone tools: presets, the operator registry and the verifier sandbox.

Registered on the app by :mod:`evolora.cli` (``evolora init``, ``evolora operators``,
``evolora engines``, ``evolora sandbox``); none loads a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from evolora.cli.display import fail


def init(
    preset: str = typer.Argument(
        ..., metavar="PRESET", help="A shipped config: arith, gsm, code, ... (the tasks/ folder)."
    ),
    dest: Optional[Path] = typer.Argument(
        None, metavar="DEST", help="File or folder to write (default ./PRESET.yaml)."
    ),
) -> None:
    """Write an editable copy of a preset config; run it with: evolora evolve DEST."""
    from evolora.config import ConfigError
    from evolora.config.presets import preset_path

    try:
        source = preset_path(preset)
    except ConfigError as error:
        fail(str(error))
    dest = Path(source.name) if dest is None else dest / source.name if dest.is_dir() else dest
    if dest.exists():
        fail(f"{dest} already exists; give another DEST or remove it first")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest, "x", encoding="utf-8") as handle:  # never overwrites
            handle.write(source.read_text(encoding="utf-8"))
    except OSError as error:
        fail(f"cannot write {dest}: {error.strerror}")
    typer.echo(f"wrote {dest}; edit it, then run: evolora evolve {dest}")


def operators(
    kind: Optional[str] = typer.Option(None, help="selection, replacement, crossover or mutation."),
    modules: list[str] = typer.Option(
        [],
        "--import",
        metavar="MODULE",
        help=(
            "Import a module of your own first (e.g. my_ops, from the current folder): its @register operators are listed too."
        ),
    ),
) -> None:
    """List every registered operator with its kind, parameters and defaults."""
    from evolora.operators import REGISTRY

    _import_user_modules(modules)

    table = Table(title="evolora operators")
    for column in ("kind", "name", "parameters (default, allowed)", "description"):
        table.add_column(column, overflow="fold")
    try:
        rows = REGISTRY.describe(kind)
    except ValueError as error:
        fail(str(error))
    for row in rows:
        table.add_row(*(plain_text(cell) for cell in row))
    Console(width=160).print(table)


def plain_text(docstring: str) -> str:
    """A docstring's text for the terminal: reST inline literals and roles reduced to the bare name
    (``num`` prints as num)."""
    import re

    return re.sub(r"(?::\w+:)?`{1,2}([^`]+)`{1,2}", r"\1", docstring)


def engines(
    modules: list[str] = typer.Option(
        [],
        "--import",
        metavar="MODULE",
        help=("Import a module of your own first (e.g. my_engines): its @register_engine engines are listed too."),
    ),
) -> None:
    """List every registered rollout engine (generation.engine) with where it runs; a class of your
    own is also named directly as generation.engine: package.module:Class."""
    from evolora.generation.registry import AUTO, ENGINES

    _import_user_modules(modules)
    table = Table(title="evolora engines (generation.engine)")
    for column in ("name", "where", "description", "class"):
        table.add_column(column, overflow="fold")
    table.add_row(AUTO, "any device", "graph where it runs, else eager (the default)", "")
    for spec in ENGINES.values():
        table.add_row(spec.name, spec.where, spec.doc, spec.target)
    Console(width=160).print(table)


def _import_user_modules(modules: list[str]) -> None:
    """Import each module (the current folder first on the path, as ``python -m`` has it), so
    its ``@register`` decorators run; exit 2 naming a module that cannot be imported."""
    import importlib
    import os
    import sys

    if modules and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:  # ImportError, or the module's own error while it runs
            fail(
                f"cannot import {module!r}: {error}; run from the folder that holds {module.replace('.', '/')}.py "
                "or put it on PYTHONPATH"
            )


def sandbox(
    program: Path = typer.Argument(..., metavar="FILE.py", help="Python program to run in the verifier sandbox."),
    timeout: float = typer.Option(2.0, "--timeout", help="Wall-clock limit in seconds (> 0)."),
    memory: int = typer.Option(256, "--memory", help="Address-space limit in MiB (>= 32)."),
    input_json: Optional[str] = typer.Option(
        None,
        "--input",
        metavar="JSON",
        help=("Standard input as a JSON value: a string is fed as is, anything else as its JSON text."),
    ),
) -> None:
    """Run one program in the verifier sandbox and print {status, output, seconds, error} as JSON.

    Exits 0 whatever the program did (status: ok, error, timeout, memory, banned,
    output_limit); 2 only for a usage error.
    """
    import json

    from evolora.sandbox import run_program

    if not timeout > 0 or memory < 32:
        fail(f"--timeout must be > 0 and --memory >= 32 (MiB), got --timeout {timeout:g} --memory {memory}")
    stdin = None
    if input_json is not None:
        try:
            value = json.loads(input_json)
        except json.JSONDecodeError as error:
            fail(f"--input is not valid JSON ({error.msg}); quote a string as --input '\"text\"'")
        stdin = value if isinstance(value, str) else json.dumps(value)
    try:
        raw = program.read_bytes()
    except OSError as error:
        fail(f"cannot read {program}: {error.strerror}; give the path of a Python file")
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as error:  # the program's fault, not a usage error
        result = {"status": "error", "output": "", "seconds": 0.0, "error": f"source is not UTF-8: {error.reason}"}
    else:
        outcome = run_program(source, timeout_s=timeout, memory_mb=memory, stdin=stdin)
        result = {
            "status": outcome.status,
            "output": outcome.output,
            "seconds": round(outcome.seconds, 4),
            "error": outcome.error,
        }
    typer.echo(json.dumps(result))
