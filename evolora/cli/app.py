"""The ``evolora`` typer application: every command, registered in the order ``--help`` lists them."""

from __future__ import annotations

import typer

from evolora.cli.cache import cache_command
from evolora.cli.execute import evolve, study
from evolora.cli.finished import evaluate_command, export_command
from evolora.cli.reports import compare, report
from evolora.cli.tools import engines, init, operators, sandbox

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="evolora: population-based self-play for LLMs with LoRA adapters as genomes (PopuLoRA).",
)


def _print_version(value: bool) -> None:
    if value:
        from evolora import __version__

        typer.echo(f"evolora {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """evolora: population-based self-play for LLMs with LoRA adapters as genomes (PopuLoRA)."""


app.command()(evolve)
app.command()(init)
app.command()(operators)
app.command()(engines)
app.command("evaluate")(evaluate_command)
app.command("export")(export_command)
app.command()(sandbox)
app.command()(study)
app.command()(report)
app.command()(compare)
app.command("cache")(cache_command)


def main() -> None:  # pragma: no cover - console entry
    app()
