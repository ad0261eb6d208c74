"""The command line's commands on a finished run: evaluate it again (greedy, and sampled pass@k)
and export one member.

Registered on the app by :mod:`evolora.cli` (``evolora evaluate``, ``evolora export``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from evolora.cli.display import console, fail, os_failure, result_console, warn
from evolora.config import ConfigError

STALE_HELP = (
    "Use final/ even when the run holds newer checkpoints (a resume that stopped before its end); otherwise refused."
)


def evaluate_command(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A finished run directory."),
    limit: Optional[int] = typer.Option(
        None, "--limit", min=1, help="Held-out problems per member (default eval.limit)."
    ),
    samples: int = typer.Option(
        0, "--samples", min=0, help="Sample N answers per problem and member and report pass@k instead (0: greedy)."
    ),
    k: str = typer.Option("1,4,16", "--k", help="The k of pass@k, comma-separated; k > --samples are left out."),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature of --samples (> 0)."),
    overrides: list[str] = typer.Option(
        [], "--set", help="Evaluate under a changed config key (needs --out): --set task.params.eval_per_cell=50"
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the new record here; the run keeps its own."),
    stale_ok: bool = typer.Option(False, "--stale-ok", help=STALE_HELP),
) -> None:
    """Evaluate a finished run's students (or single agent) and the base again; update final/summary.json.

    Greedy by default (the summary's held-out numbers are rewritten, the old ones kept). With
    --samples N: sampled pass@k (Chen et al.'s unbiased estimator) of every member and the base,
    written to the summary's "pass_at_k"; the greedy numbers are left as they are. With --set and
    --out: a greedy evaluation under changed keys (a larger held-out grid), as a new record in --out.
    """
    from evolora.evaluation.rerun import evaluate_run
    from evolora.evaluation.sampled import check_options, sampled_pass_at_k
    from evolora.model import ModelNotFoundError
    from evolora.quiet import quiet_libraries
    from evolora.run_dir import RunDirLocked, check_out
    from evolora.user_code import UserCodeError
    from evolora.versions import guard_versions

    ks = _ks(k)
    quiet_libraries()
    try:
        guard_versions(report=warn)
        if samples and (overrides or out):
            raise ValueError("--set and --out apply to greedy evaluation; leave them off with --samples")
        if out is not None:  # before anything is read or loaded
            check_out(out, then="give a new directory for this record (the run keeps its own)")
        if samples:
            check_options(samples, temperature, ks)
            console.print(
                f"sampling {samples} answers per held-out problem for every member and the base "
                f"of {run_dir} (T = {temperature:g}) ...",
                highlight=False,
                soft_wrap=True,
            )
            step = _announce(run_dir, stale_ok)
            record = sampled_pass_at_k(
                run_dir, samples=samples, ks=ks, temperature=temperature, limit=limit, allow_stale=stale_ok
            )
        else:
            step = _announce(run_dir, stale_ok)
            held_out = evaluate_run(run_dir, limit=limit, overrides=overrides, out=out, allow_stale=stale_ok)
    except (FileNotFoundError, ValueError, ConfigError, RunDirLocked, ModelNotFoundError) as error:
        fail(str(error))
    except UserCodeError as error:  # the run's own task or engine, named in its config
        fail(f"{error}\nthe run's summary and answers are as they were: fix it and run again")
    except OSError as error:
        os_failure(error, "the run's summary and answers are as they were", writing=run_dir)
    if samples:
        _print_pass_at_k(run_dir, record, step)
    else:
        _print_greedy(run_dir, held_out, step)


def _announce(run_dir: Path, stale_ok: bool) -> int:
    """Print which adapters are read (``final/`` and their step) and return the step; a ``final/``
    older than the newest checkpoint raises :class:`evolora.run_dir.StaleFinal` unless ``stale_ok``."""
    import json

    from evolora.run_dir import final_step

    summary_path = run_dir / "final" / "summary.json"
    if not summary_path.is_file():
        raise FileNotFoundError(
            f"{summary_path} does not exist; give a finished run directory (evolora evolve ... --out DIR)"
        )
    try:
        summary = json.loads(summary_path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{summary_path} is not valid JSON ({error.msg} at line {error.lineno}); "
            f"write final/ again with: evolora evolve --resume {run_dir}"
        ) from None
    step = final_step(run_dir, summary, allow_stale=stale_ok)
    console.print(f"reading the adapters of step {step} from {run_dir / 'final'}", highlight=False, soft_wrap=True)
    _stale_note(run_dir, step)
    return step


def _stale_note(run_dir: Path, step: int) -> None:
    """A warning line when ``--stale-ok`` lets an older ``final/`` through."""
    from evolora.run_dir import newest_checkpoint_step

    newest = newest_checkpoint_step(run_dir)
    if newest is not None and newest > step:
        console.print(
            f"[yellow]warning:[/] the run's checkpoints reach step {newest}; using final/ of step {step} "
            "as --stale-ok asks",
            highlight=False,
            soft_wrap=True,
        )


def _print_greedy(run_dir: Path, held_out: dict, step: int) -> None:
    """The greedy held-out table: one row per member and the base (the adapters of ``step``)."""
    table = Table(title=f"held-out accuracy, {run_dir}, adapters of step {step}")
    for column in ("member", "correct", "total", "accuracy"):
        table.add_column(column)
    for name, result in held_out.items():
        table.add_row(name, str(result["correct"]), str(result["total"]), f"{result['accuracy']:.1%}")
    result_console().print(table)


def _print_pass_at_k(run_dir: Path, record: dict, step: int) -> None:
    """The sampled pass@k table: one row per member and the base."""
    keys = [key for key in record["members"]["base"] if key.startswith("pass@")]
    table = Table(
        title=f"held-out pass@k, {record['samples']} samples at T = {record['temperature']:g}, "
        f"{record['limit']} problems, {run_dir}, adapters of step {step}"
    )
    for column in ("member", *keys):
        table.add_column(column)
    for name, values in record["members"].items():
        table.add_row(name, *(f"{values[key]:.1%}" for key in keys))
    result_console().print(table)


def _ks(text: str) -> tuple[int, ...]:
    """The --k list as ints; exit 2 naming the option when it is not a comma-separated list of ints."""
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        fail(f"--k must be comma-separated integers such as 1,4,16, got {text!r}")


def export_command(
    run_dir: Path = typer.Argument(..., metavar="RUN_DIR", help="A finished run directory."),
    member: str = typer.Option(
        "best",
        "--member",
        help="best (the student evaluated under eval.members=fittest; else top by held-out accuracy, else μ−3σ) or an id.",
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory (default RUN_DIR/export/<id>)."),
    merge: bool = typer.Option(True, "--merge/--no-merge", help="Merged standalone model, or the PEFT adapter."),
    stale_ok: bool = typer.Option(False, "--stale-ok", help=STALE_HELP),
) -> None:
    """Export one member with a model card: merged into a standalone Hugging Face model, or as its PEFT adapter."""
    from evolora.export import export_member, plan_export
    from evolora.game import MEMBER_ROLES
    from evolora.model import ModelNotFoundError
    from evolora.quiet import quiet_libraries
    from evolora.run_dir import RunDirLocked

    try:
        plan = plan_export(run_dir, member, out=out, merge=merge, allow_stale=stale_ok)
    except (FileNotFoundError, ValueError, ConfigError) as error:
        fail(str(error))
    role = plan.member["role"] + ("" if plan.member["role"] in MEMBER_ROLES else ", not a student")
    console.print(
        f"exporting {plan.member['id']} ({role}; {plan.criterion}) as "
        f"{'a merged model' if merge else 'its PEFT adapter'}: the adapter of step {plan.step} "
        f"from {plan.adapter_dir} ...",
        highlight=False,
        soft_wrap=True,
    )
    _stale_note(run_dir, plan.step)
    quiet_libraries()
    try:
        typer.echo(str(export_member(plan)))
    except (ModelNotFoundError, ValueError, RunDirLocked) as error:
        fail(str(error))
    except OSError as error:
        os_failure(error, f"nothing was left in {plan.out}", writing=plan.out)
