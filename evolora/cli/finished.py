"""The command line's commands on a finished run: evaluate it again (greedy, and sampled pass@k)
and export one member.

Registered on the app by :mod:`evolora.cli` (``evolora evaluate``, ``evolora export``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from evolora.cli.display import console, fail, result_console
from evolora.config import ConfigError


def evaluate_command(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A finished run directory."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Held-out problems per member (default eval.limit)."),
    samples: int = typer.Option(0, "--samples", min=0,
                                help="Also sample N answers per problem and member and report pass@k (0: greedy only)."),
    k: str = typer.Option("1,4,16", "--k", help="The k of pass@k, comma-separated, each <= --samples."),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature of --samples (> 0)."),
) -> None:
    """Evaluate a finished run's students (or single agent) and the base again; update final/summary.json.

    With --samples N it also writes sampled pass@k (Chen et al.'s unbiased estimator) for every
    member and the base into the summary's "pass_at_k".
    """
    from evolora.quiet import quiet_libraries
    from evolora.evaluation.rerun import evaluate_run
    from evolora.evaluation.sampled import check_options, sampled_pass_at_k

    ks = _ks(k)
    quiet_libraries()
    try:
        if samples:
            check_options(samples, temperature, ks)
        held_out = evaluate_run(run_dir, limit=limit)
        record = sampled_pass_at_k(run_dir, samples=samples, ks=ks, temperature=temperature, limit=limit) if samples else None
    except (FileNotFoundError, ValueError, ConfigError) as error:
        fail(str(error))
    table = Table(title=f"held-out accuracy, {run_dir}")
    columns = ["member", "correct", "total", "greedy"] + ([f"pass@{x}" for x in ks if x <= samples] if record else [])
    for column in columns:
        table.add_column(column)
    for name, result in held_out.items():
        sampled = [f"{record['members'][name][c]:.1%}" for c in columns[4:]] if record and name in record["members"] else []
        table.add_row(name, str(result["correct"]), str(result["total"]), f"{result['accuracy']:.1%}", *sampled)
    result_console().print(table)


def _ks(text: str) -> tuple[int, ...]:
    """The --k list as ints; exit 2 naming the option when it is not a comma-separated list of ints."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        fail(f"--k must be comma-separated integers such as 1,4,16, got {text!r}")


def export_command(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A finished run directory."),
    member: str = typer.Option("best", "--member", help="best (top student by held-out accuracy, else μ−3σ) or an id."),
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory (default RUN_DIR/export/<id>)."),
    merge: bool = typer.Option(True, "--merge/--no-merge", help="Merged standalone model, or the PEFT adapter."),
) -> None:
    """Export one member with a model card: merged into a standalone Hugging Face model, or as its PEFT adapter."""
    from evolora.quiet import quiet_libraries
    from evolora.export import export_member, plan_export
    from evolora.game import MEMBER_ROLES
    from evolora.model import ModelNotFoundError

    try:
        plan = plan_export(run_dir, member, out=out, merge=merge)
    except (FileNotFoundError, ValueError, ConfigError) as error:
        fail(str(error))
    role = plan.member["role"] + ("" if plan.member["role"] in MEMBER_ROLES else ", not a student")
    console.print(f"exporting {plan.member['id']} ({role}; {plan.criterion}) as "
                  f"{'a merged model' if merge else 'its PEFT adapter'} ...", highlight=False, soft_wrap=True)
    quiet_libraries()
    try:
        typer.echo(str(export_member(plan)))
    except (ModelNotFoundError, ValueError) as error:
        fail(str(error))
