"""The run commands of the command line: ``evolora evolve`` (one run, or its resumption) and
``evolora study`` (every seed × arm of a config, then their comparison), with what a run needs
around it there: the checks before anything loads, the run directory's lock, progress, the final
evaluation and table, and one clear line for each way it can fail."""

from __future__ import annotations

import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

import typer

from evolora.cli.display import console, fail, os_failure, result_console, warn
from evolora.cli.reports import _study_tables, compare, report
from evolora.cli.summary import print_summary
from evolora.config import Config, ConfigError, check_resume, load_config, load_run_config
from evolora.user_code import UserCodeError


def _prepare(
    config_path: Optional[Path], overrides: list[str], seed: Optional[int], out: Optional[Path], resume: Optional[Path]
) -> tuple[Config, Path]:
    try:
        if resume is not None:
            if not (resume / "config.yaml").exists():
                fail(f"{resume} is not a run directory (no config.yaml); give the --out directory of an earlier run")
            config = load_run_config(resume, overrides, seed=seed)
            check_resume(load_run_config(resume), config)
            return config, resume
        if config_path is None:
            fail("give a config file or preset (e.g. gsm, tasks/gsm.yaml) or --resume RUN_DIR")
        config = load_config(config_path, overrides, seed=seed)
    except ConfigError as error:
        fail(str(error))
    if out is None:
        out = Path("runs") / f"{config_path.stem}-{datetime.now():%Y%m%d-%H%M%S}"
    _refuse_occupied(out)
    return config, out


def _refuse_occupied(out: Path) -> None:
    """Exit 2 with one line when ``out`` is an existing file or already holds a run's files."""
    from evolora.run_dir import run_marker

    if out.exists() and not out.is_dir():
        fail(f"--out {out} is an existing file, not a directory; choose another --out")
    marker = run_marker(out)
    if marker is not None:
        fail(f"{out} already holds a run ({marker}); continue it with --resume {out} or choose another --out")


def evolve(
    config_path: Optional[Path] = typer.Argument(
        None, metavar="CONFIG", help="YAML run config or preset, e.g. gsm or tasks/gsm.yaml."
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default runs/<config>-<time>)."),
    overrides: list[str] = typer.Option([], "--set", help="Override a config key: --set evolution.gamma=0.5"),
    seed: Optional[int] = typer.Option(None, "--seed", help="Run seed (overrides run.seed)."),
    resume: Optional[Path] = typer.Option(
        None, "--resume", help="Continue the run in this directory from its last checkpoint."
    ),
    no_eval: bool = typer.Option(False, "--no-eval", help="Skip the held-out evaluation at the end."),
    verbose: bool = typer.Option(False, "--verbose", help="Show third-party warnings, logs and progress bars."),
) -> None:
    """Run PopuLoRA self-play: teachers propose, students solve, adapters learn and evolve."""
    config, out = _prepare(config_path, overrides, seed, out, resume)
    _execute(config, out, resume=resume is not None, evaluate=not no_eval, verbose=verbose)


def _execute(
    config: Config, out: Path, *, resume: bool, evaluate: bool = True, verbose: bool = False, study: bool = False
) -> dict | None:
    """Run (or resume) one run to its end in ``out``: checks, lock, progress, final evaluation, table.

    Nothing is written before the run directory's lock is held (:func:`evolora.run_dir.lock_run_dir`,
    atomic: one ``flock``), and what the directory holds is read again under the lock, so a second
    process on the same directory either gets the lock message or sees the first one's run: ``evolve``
    refuses a directory that holds a run; a study run (``study``) finished meanwhile is skipped
    (returns None) and one started meanwhile is resumed."""
    _check_device(config)
    from evolora.model import ModelNotFoundError, check_lora_fits, check_model_available
    from evolora.run_dir import RunDirLocked, finished_at, lock_run_dir
    from evolora.versions import guard_versions

    try:
        guard_versions(report=warn)  # torch, transformers, peft outside the tested range: one line each
        check_model_available(config.model.name)
        check_lora_fits(config.model.name, config.lora.rank, config.lora.target_modules)
    except (ModelNotFoundError, ValueError) as error:
        fail(str(error))
    except OSError as error:  # e.g. a model.name longer than a file name may be
        fail(
            f"model.name {_short_name(config.model.name)}: {error.strerror}; give an embedded name, "
            "a Hugging Face id or a local directory"
        )
    try:
        lock = lock_run_dir(out)
        lock.__enter__()
    except RunDirLocked as error:
        fail(str(error))
    except OSError as error:
        fail(f"cannot write to output directory {out}: {error.strerror}; choose another with --out")
    try:
        if not resume and not study:
            _refuse_occupied(out)  # another process wrote a run here before this one got the lock
        if resume and (done := finished_at(out, config.run.steps)) is not None:
            console.print(
                f"{out} has finished its {done} steps (results in {out / 'final'}); evolora evaluate {out} "
                f"runs its held-out evaluation again, --set run.steps=N (N > {done}) continues it",
                highlight=False,
            )
            return None
        if not resume and (out / "metrics.jsonl").exists():
            if (out / "final" / "summary.json").is_file():
                console.print(f"{out} was finished by another process; skipped", highlight=False)
                return None
            resume = True
        return _run_locked(config, out, resume=resume, evaluate=evaluate, verbose=verbose)
    except OSError as error:  # ENOSPC, EDQUOT, EFBIG, EACCES, EROFS, EIO: one line with advice that fits
        os_failure(error, _what_is_intact(out), f"continue with: evolora evolve --resume {out}", writing=out)
    finally:
        lock.__exit__(None, None, None)


def _what_is_intact(out: Path) -> str:
    """What a run interrupted by an OS error still holds: its last checkpoint, or nothing half-written."""
    from evolora.run_dir import newest_checkpoint_step

    step = newest_checkpoint_step(out)
    return f"the checkpoint of step {step} is intact" if step is not None else "nothing half-written is left"


def _short_name(name: str) -> str:
    from evolora.config.strict_yaml import short

    return short(name)


def _check_device(config: Config) -> None:
    """Exit 2 with one line, before anything is written or loaded, when ``model.device`` names a GPU
    torch does not see here, or ``generation.engine: graph`` finds none (in process; each Ray
    worker resolves its own device)."""
    from evolora.generation.registry import resolve_engine
    from evolora.model.device import resolve_device

    if config.run.backend == "local":
        try:
            resolve_engine(config.generation.engine, resolve_device(config.model.device))
        except ValueError as error:
            fail(str(error))


def _run_locked(config: Config, out: Path, *, resume: bool, evaluate: bool, verbose: bool) -> dict:
    """The body of :func:`_execute`, run while this process holds the run directory's lock."""
    from evolora.callbacks import Checkpointer, ProgressBar
    from evolora.cli.display import selection_note, start_line
    from evolora.distributed.recovery import ClusterLost, WorkerLost
    from evolora.loggers import LoggerError, close_loggers, open_loggers
    from evolora.model.threads import ThreadPolicy
    from evolora.quiet import quiet_libraries

    began = time.perf_counter()
    quiet_libraries(verbose)
    console.print(start_line(config, out, resume=resume), highlight=False)
    if note := selection_note(config):
        console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
    try:
        run = _open_run(config, out, resume=resume)
    except UserCodeError as error:  # a user's engine (or task) that fails while it is built
        _user_code_failure(error, out, verbose=verbose)
    threads = ThreadPolicy(
        config.model.num_threads if config.run.backend == "local" else None,
        say=lambda line: console.print(f"[yellow]note:[/] {line}", highlight=False),
    )
    threads.apply()  # auto: the cores free now and the runs beside this one, checked again after every step
    run.phase_hooks.append(threads.at_phase)  # and glanced at when each phase starts (a play, train, evolve, eval)
    try:
        loggers, summary = open_loggers(config.run.loggers, out, start_step=run.step), None  # jsonl, tensorboard, wandb
    except LoggerError as error:
        fail(str(error))
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with ProgressBar(config.run.steps, start=run.step, console=result_console()) as progress:
            run.train(loggers + [Checkpointer(config.run.checkpoint_every, config.run.steps), progress, threads])
        source = run.task.held_out_source
        from evolora.tasks.base import Task

        has_family = config.eval.family and type(run.task).family_held_out is not Task.family_held_out
        family = f" and up to {config.eval.family} of the teachers' problem family" if has_family else ""
        console.print(
            f"evaluating on {config.eval.limit} held-out problems ({source}){family} and writing final adapters ..."
            if evaluate and config.eval.enabled and config.eval.limit and source
            else "writing final adapters ...",
            highlight=False,
        )
        summary = run.finish(evaluate=evaluate)
    except KeyboardInterrupt:
        console.print("\n" + interrupted_line(out, run.step, config.run.checkpoint_every, evaluate=evaluate))
        raise typer.Exit(130)
    except UserCodeError as error:  # the user's own operator (or other code named in YAML) failed
        _user_code_failure(error, out, verbose=verbose)
    except WorkerLost as error:  # run.backend=ray; a ClusterLost names the run directory to resume already
        fail(str(error) if isinstance(error, ClusterLost) else f"{error}; continue with: evolora evolve --resume {out}")
    finally:
        signal.signal(signal.SIGTERM, previous)  # in-process callers (tests, notebooks) get theirs back
        close_loggers(loggers, summary)
        run.close()  # the Ray workers (nothing in-process)
    summary = _with_verdict(summary, out)
    print_summary(summary)
    console.print(f"done in {time.perf_counter() - began:.0f} s; results in {out}")
    return summary


def interrupted_line(out: Path, step: int, checkpoint_every: int, *, evaluate: bool) -> str:
    """The line a stopped run prints: the last finished step, the checkpoint a resume starts from
    (steps after it are replayed), and the command that continues it as it was started.

    Args:
        out: the run directory.
        step: the steps finished when the run stopped.
        checkpoint_every: ``run.checkpoint_every``, named when finished steps will be replayed.
        evaluate: False when the run was started with ``--no-eval``, which the command then repeats.
    """
    from evolora.run_dir import newest_checkpoint_step

    saved = newest_checkpoint_step(out)
    if saved is None:
        where = f"; no checkpoint yet (run.checkpoint_every: {checkpoint_every}), a resume starts from step 0"
    elif saved < step:
        where = f"; a resume restarts from the checkpoint of step {saved} (run.checkpoint_every: {checkpoint_every})"
    else:
        where = ""
    command = f"evolora evolve --resume {out}" + ("" if evaluate else " --no-eval")
    return f"interrupted at step {step}{where}; continue with: {command}"


def _user_code_failure(error: Exception, out: Path, *, verbose: bool) -> None:
    """Exit 2 with at most 3 lines naming the user's code and its contract (``--verbose``: the
    traceback first); the run's last checkpoint is intact, so it resumes once the code is fixed."""
    if verbose:
        import traceback

        console.print("".join(traceback.format_exception(error)), markup=False, highlight=False, soft_wrap=True)
    fail(
        f"{error}\nthe last checkpoint is intact: fix it, then continue with: evolora evolve --resume {out}"
        + ("" if verbose else " (--verbose shows the traceback)")
    )


def _with_verdict(summary: dict, out: Path) -> dict:
    """``summary`` with its verdict (:func:`evolora.report.verdict.run_verdict`), also written to
    ``final/summary.json``."""
    from evolora.io import read_jsonl, write_json_atomic
    from evolora.report.verdict import run_verdict

    summary = {**summary, "verdict": run_verdict(summary, read_jsonl(out / "metrics.jsonl"))}
    if (out / "final").is_dir():
        write_json_atomic(out / "final" / "summary.json", summary)
    return summary


def _open_run(config: Config, out: Path, *, resume: bool):
    """Build the run; on resume restore the newest intact checkpoint and repair the logs to it."""
    import warnings

    from evolora.checkpoint import CheckpointError
    from evolora.model import ModelNotFoundError
    from evolora.run import Run
    from evolora.run_dir import log_counts, repair_logs

    try:
        run = Run(config, out)
    except (ModelNotFoundError, ValueError) as error:  # found only once the model is loaded
        fail(str(error))
    if not resume:
        return run
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            restored = run.load_checkpoint()
        except CheckpointError as error:
            fail(str(error))
    notes = [str(w.message) for w in caught if issubclass(w.category, UserWarning) and "evolora" in w.filename]
    notes += repair_logs(out, run.step)  # drop records written after the checkpoint, a torn line, duplicates
    run.log_counts = log_counts(out)
    for note in notes:
        console.print(f"[yellow]warning:[/] {note}", highlight=False, soft_wrap=True)
    if restored:
        console.print(f"resumed at step {run.step}")
    return run


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def study(
    config_path: Path = typer.Argument(
        ..., metavar="CONFIG", help="YAML run config or preset, e.g. arith or tasks/arith.yaml."
    ),
    seeds: str = typer.Option("0,1,2", "--seeds", help="Seeds: 0,1,2 or 0-2."),
    arms: str = typer.Option(
        "population,single_agent",
        "--arms",
        help="Arms: population, single_agent, single_agent_total, no_evolution, independent_pairs, random_reward, or the config's study.arms.",
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="Study directory (default runs/study-<config>)."),
    overrides: list[str] = typer.Option([], "--set", help="Override a config key in every run: --set run.steps=10"),
    verbose: bool = typer.Option(False, "--verbose", help="Show third-party warnings, logs and progress bars."),
    samples: int = typer.Option(
        0,
        "--samples",
        min=0,
        help="Also sampled pass@k (k = 1, 4, 16) of every run's members and the base, with N answers per problem (0: off).",
    ),
    reference: Optional[str] = typer.Option(
        None,
        "--reference",
        help="The arm every other arm is compared with in the study tables (default: population if it is in --arms, else the first arm).",
    ),
) -> None:
    """Run every seed × arm of CONFIG (finished runs are skipped, started ones resumed), then compare them."""
    from evolora.run_dir import OutRefused, check_out
    from evolora.study import parse_arms, parse_seeds, study_pass_at_k, study_plan

    out = out if out is not None else Path("runs") / f"study-{config_path.stem}"
    try:
        check_out(out, then="give a study directory (new, or one an earlier study wrote)")
        arm_names = parse_arms(arms)
        plan = study_plan(config_path, seeds=parse_seeds(seeds), arms=arm_names, out=out, overrides=overrides)
    except (ConfigError, OutRefused) as error:
        fail(str(error))
    if reference is None:
        reference = "population" if "population" in arm_names else arm_names[0]
    elif reference not in arm_names and not any(out.glob(f"{reference}-s*")):
        fail(f"--reference {reference} is neither in --arms ({', '.join(arm_names)}) nor a finished arm in {out}")
    for number, item in enumerate(plan, start=1):
        console.print(
            f"[bold]study run {number}/{len(plan)}[/]: {item.arm}, seed {item.seed} ({item.state}) -> {item.out}"
        )
        if item.state != "done":
            _execute(item.config, item.out, resume=item.state == "resume", verbose=verbose, study=True)
    study_pass_at_k(plan, samples, say=lambda text: console.print(text, highlight=False)) if samples else None
    if len(plan) > 1:
        compare([item.out for item in plan], out / "report")
        _study_tables(out, reference)
    else:
        report([plan[0].out], out / "report")
