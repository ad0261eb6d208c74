"""Export one member of a finished run: a standalone Hugging Face model, or its PEFT adapter.

    plan = plan_export("runs/gsm", "best")              # checks everything; loads no model
    export_member(plan)                                  # runs/gsm/export/s3/ (merged)
    export_member(plan_export("runs/gsm", "t0", merge=False))

``best`` is the one student evaluated in a run with ``eval.members: fittest`` (the fittest by
the run's fitness); else the top student (or the single agent) by held-out accuracy when every
candidate has one (ties broken by μ − 3σ), else by the conservative rating μ − 3σ that ranks
members during the run (PopuLoRA (arXiv 2605.16727) §2). A merged export folds the LoRA update
ΔW = (alpha / r) · B A into the base weights with PEFT's ``merge_and_unload`` and writes
weights, tokenizer and a greedy generation config that ``AutoModelForCausalLM.from_pretrained``
loads without PEFT; ``merge=False`` copies the PEFT adapter directory (``final/<id>/``)
unchanged. Both carry a ``README.md`` model card: base model, role, lineage, ratings,
held-out accuracy, the run's config and the citations. The output is written atomically and
an existing non-empty directory is never overwritten.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evolora import __version__
from evolora.config import Config, load_run_config
from evolora.game import MEMBER_ROLES
from evolora.io import _umask, atomic_path
from evolora.run_dir import final_step

if TYPE_CHECKING:
    from evolora.hf_types import CausalLM, Tokenizer

"""Roles ``best`` chooses from: students, or the single agent of a ``single_agent`` run."""
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")

POPULORA_BIBTEX = """@misc{castanyer2026populora,
  title         = {PopuLoRA: Co-Evolving LLM Populations for Reasoning Self-Play},
  author        = {Castanyer and Bradway and Wolf and Lin and Mavor-Parker and Sargent},
  year          = {2026},
  eprint        = {2605.16727},
  archivePrefix = {arXiv},
  doi           = {10.48550/arXiv.2605.16727},
  url           = {https://arxiv.org/abs/2605.16727}
}"""
"""The PopuLoRA paper, as listed under ``references`` in the repository's CITATION.cff."""

EVOLORA_BIBTEX = f"""@software{{evolora,
  title   = {{evolora}},
  author  = {{{{evolora developers}}}},
  version = {{{__version__}}},
  year    = {{2026}},
  license = {{Apache-2.0}}
}}"""
"""This software, as its CITATION.cff describes it (title, authors, version, licence)."""


class ExportError(ValueError):
    """A bad export request (no such run, member or adapter; an occupied output directory)."""


@dataclass(frozen=True)
class ExportPlan:
    """A checked export request; nothing is loaded or written until :func:`export_member`.

    Attributes:
        run_dir: the finished run directory.
        member: the member's row of ``final/summary.json`` (id, role, mu, sigma,
            conservative, elo, wins/losses/draws, parents, operator, born_step, held_out).
        criterion: how the member was chosen, in words (shown on the console and in the card).
        out: the output directory (absent or empty).
        merge: True for a merged standalone model, False for the PEFT adapter.
        config: the run's validated config; config_text: its ``config.yaml`` as stored.
        summary: the run's ``final/summary.json``.
        step: the step of the exported adapters.
    """

    run_dir: Path
    member: dict
    criterion: str
    out: Path
    merge: bool
    config: Config
    config_text: str
    summary: dict
    step: int = 0
    """The step of the adapters exported (``final/`` as written when the run finished that step)."""

    @property
    def adapter_dir(self) -> Path:
        """The member's PEFT adapter directory, ``RUN_DIR/final/<id>/``."""
        return self.run_dir / "final" / self.member["id"]


def choose_member(summary: dict, member: str = "best") -> tuple[dict, str]:
    """The summary row of ``member`` ("best" or an id) and how it was chosen, in words.

    Raises:
        ExportError: an unknown id, or ``best`` in a run without students (or agent).
    """
    rows = summary.get("individuals") or []
    if member != "best":
        for row in rows:
            if row["id"] == member:
                return row, "asked for by id"
        raise ExportError(
            f"the run has no member {member!r}; its members are {[r['id'] for r in rows]} (or give --member best)"
        )
    candidates = [row for row in rows if row["role"] in MEMBER_ROLES]
    if not candidates:
        raise ExportError("the run lists no student or agent to choose from; give a member id with --member")
    evaluated = [row for row in candidates if (row.get("held_out") or {}).get("accuracy") is not None]
    source = summary.get("held_out_source") or "the task's held-out problems"
    if summary.get("held_out_members") == "fittest" and len(evaluated) == 1:  # eval.members: fittest
        best, held = evaluated[0], evaluated[0]["held_out"]
        return best, (
            f"the fittest {best['role']} by the run's fitness, the one evaluated: {held['accuracy']:.1%} "
            f"({held['correct']}/{held['total']}) on {source}"
        )
    if len(evaluated) == len(candidates):
        best = max(candidates, key=lambda r: (r["held_out"]["accuracy"], r["conservative"]))
        held = best["held_out"]
        return best, (
            f"best {best['role']} by held-out accuracy: {held['accuracy']:.1%} "
            f"({held['correct']}/{held['total']}) on {source}; ties broken by μ − 3σ"
        )
    best = max(candidates, key=lambda r: r["conservative"])
    return best, (
        f"best {best['role']} by conservative rating μ − 3σ = {best['conservative']:.2f} "
        "(the run has no held-out accuracy for every candidate)"
    )


def plan_export(
    run_dir: str | Path,
    member: str = "best",
    *,
    out: str | Path | None = None,
    merge: bool = True,
    allow_stale: bool = False,
) -> ExportPlan:
    """Check an export request without loading a model.

    Args:
        run_dir: a finished run directory (``config.yaml``, ``final/summary.json``, ``final/<id>/``).
        member: ``"best"`` (see :func:`choose_member`) or a member id such as ``"s3"`` (any role).
        out: the output directory; default ``RUN_DIR/export/<id>`` (``<id>-adapter`` without merge).
        merge: merged standalone model (True) or the PEFT adapter (False).
        allow_stale: export ``final/`` even when a checkpoint is newer
            (:func:`evolora.run_dir.final_step`); the plan's ``step`` names the step exported.

    Raises:
        ExportError: not a finished run (or an unreadable summary), unknown member, missing
            adapter files, or ``out`` exists and is not an empty directory.
        ConfigError: the stored config does not validate.
    """
    run_dir = Path(run_dir)
    summary_path = run_dir / "final" / "summary.json"
    for path in (run_dir / "config.yaml", summary_path):
        if not path.is_file():
            raise ExportError(f"{path} does not exist; give a finished run directory (evolora evolve ... --out DIR)")
    config = load_run_config(run_dir, ["run.loggers=[jsonl]"])  # trackers are not needed to export
    try:
        summary = json.loads(summary_path.read_text())
    except json.JSONDecodeError as error:
        raise ExportError(
            f"{summary_path} is not valid JSON ({error.msg} at line {error.lineno}); "
            f"write final/ again with: evolora evolve --resume {run_dir}"
        ) from None
    try:
        step = final_step(run_dir, summary, allow_stale=allow_stale)
    except ValueError as error:
        raise ExportError(str(error)) from None
    row, criterion = choose_member(summary, member)
    for name in ADAPTER_FILES:
        if not (run_dir / "final" / row["id"] / name).is_file():
            raise ExportError(f"{run_dir / 'final' / row['id'] / name} does not exist; the run's adapters are missing")
    out = Path(out) if out is not None else run_dir / "export" / (row["id"] if merge else f"{row['id']}-adapter")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} already exists and is not empty; choose another --out or remove it")
    return ExportPlan(
        run_dir=run_dir,
        member=row,
        criterion=criterion,
        out=out,
        merge=merge,
        config=config,
        config_text=(run_dir / "config.yaml").read_text(),
        summary=summary,
        step=step,
    )


def lineage_of(summary: dict, member_id: str) -> list[dict]:
    """The member and its ancestors (parents, their parents, ...) from ``summary["lineage"]``,
    oldest first: each ``{"id", "role", "parents", "operator", "born_step"}``."""
    known = {entry["id"]: entry for entry in summary.get("lineage") or []}
    for row in summary.get("individuals") or []:
        known.setdefault(row["id"], row)
    found, todo = {}, [member_id]
    while todo:
        current = todo.pop()
        if current in found or current not in known:
            continue
        entry = known[current]
        found[current] = {
            "id": current,
            "role": entry.get("role"),
            "parents": list(entry.get("parents") or []),
            "operator": entry.get("operator"),
            "born_step": entry.get("born_step"),
        }
        todo.extend(found[current]["parents"])
    return sorted(found.values(), key=lambda e: (e["born_step"] or 0, e["id"]))


def _front_matter(plan: ExportPlan) -> str:
    library = "transformers" if plan.merge else "peft"
    return "\n".join(
        [
            "---",
            f"library_name: {library}",
            f"base_model: {json.dumps(plan.config.model.name)}",
            "tags: [evolora, populora, lora, self-play]",
            "---",
            "",
        ]
    )


def _loading(plan: ExportPlan) -> list[str]:
    if plan.merge:
        return [
            "```python",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            "",
            'model = AutoModelForCausalLM.from_pretrained("DIR")',
            'tokenizer = AutoTokenizer.from_pretrained("DIR")',
            "```",
            "",
            "`generation_config.json` decodes greedily, as the held-out evaluation did; give "
            f"`max_new_tokens` to `generate` (the run's evaluation used {plan.config.eval.max_new_tokens}).",
        ]
    return [
        "```python",
        "from peft import PeftModel",
        "from evolora.model import load_base",
        "",
        f"base, tokenizer = load_base({plan.config.model.name!r}, dtype={plan.config.model.dtype!r})",
        'model = PeftModel.from_pretrained(base, "DIR")',
        "```",
        "",
        "Any copy of the same base model works in place of `load_base` (e.g. "
        "`AutoModelForCausalLM.from_pretrained(BASE)`).",
    ]


def _held_out_line(held: dict | None, base: dict | None) -> str:
    if not held:
        return "Not evaluated (at the end of a run only students and the single agent are)."
    line = f"{held['accuracy']:.1%} ({held['correct']}/{held['total']}), greedy pass@1"
    return line + (f"; the base model: {base['accuracy']:.1%} ({base['correct']}/{base['total']})." if base else ".")


def model_card(plan: ExportPlan) -> str:
    """The ``README.md`` model card of an export (Markdown with Hugging Face front matter)."""
    row, config = plan.member, plan.config
    held, base = row.get("held_out"), (plan.summary.get("held_out") or {}).get("base")
    source = plan.summary.get("held_out_source") or "not recorded"
    lines = [
        _front_matter(plan),
        f"# evolora member {row['id']} ({row['role']}) of run `{plan.run_dir.name}`",
        "",
        (
            "A standalone model: the member's LoRA update merged into the base weights (PEFT "
            "`merge_and_unload`); it loads with `transformers` alone."
            if plan.merge
            else "A PEFT LoRA adapter (rank {r}, alpha {a:g}) for the base model below.".format(
                r=config.lora.rank, a=config.lora.alpha
            )
        ),
        f"Trained by evolora {__version__}, an implementation of PopuLoRA (arXiv 2605.16727): "
        f"{plan.summary.get('steps')} steps of population self-play on task `{config.task.name}` "
        f"(mode `{plan.summary.get('mode')}`, seed {plan.summary.get('seed')}).",
        "",
        f"**Chosen:** {plan.criterion}.",
        "",
        "## Base model",
        "",
        f"`{config.model.name}` ({config.model.dtype} weights).",
        "",
        "## Ratings",
        "",
        "| μ | σ | μ − 3σ | Elo | wins / losses / draws |",
        "|---|---|---|---|---|",
        f"| {row['mu']:.2f} | {row['sigma']:.2f} | {row['conservative']:.2f} | {row['elo']:.0f} "
        f"| {row['wins']} / {row['losses']} / {row['draws']} |",
        "",
        "## Held-out accuracy",
        "",
        _held_out_line(held, base),
        "",
        f"Held-out source: {source}.",
        "",
        "## Lineage",
        "",
        "| id | role | born at step | operator | parents |",
        "|---|---|---|---|---|",
        *[
            f"| {e['id']} | {e['role']} | {e['born_step']} | {e['operator']} | {', '.join(e['parents']) or '-'} |"
            for e in lineage_of(plan.summary, row["id"])
        ],
        "",
        "## How to load",
        "",
        *_loading(plan),
        "",
        "## Training config (`config.yaml` of the run)",
        "",
        "```yaml",
        plan.config_text.rstrip(),
        "```",
        "",
        "## Citation",
        "",
        "PopuLoRA (arXiv 2605.16727), whose method trained this member:",
        "",
        "```bibtex",
        POPULORA_BIBTEX,
        "```",
        "",
        "and the evolora software (its CITATION.cff):",
        "",
        "```bibtex",
        EVOLORA_BIBTEX,
        "```",
        "",
    ]
    return "\n".join(lines)


def _write_merged(plan: ExportPlan, directory: Path, model: CausalLM, tokenizer: Tokenizer) -> None:
    """Merge the member's adapter into ``model`` (float32), cast to the run's dtype, and save the
    model, the tokenizer and a greedy generation config (``do_sample=False``, special token ids)."""
    import torch
    from peft import PeftModel
    from transformers import GenerationConfig

    merged = PeftModel.from_pretrained(model.float(), str(plan.adapter_dir)).merge_and_unload()
    merged = merged.to(getattr(torch, _resolved_dtype(plan.config.model.dtype)))
    merged.generation_config = GenerationConfig(
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        do_sample=False,
    )  # no max_new_tokens: callers (lm-eval) set theirs
    merged.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))


def export_member(plan: ExportPlan, *, model: CausalLM | None = None, tokenizer: Tokenizer | None = None) -> Path:
    """Write the export ``plan`` describes, atomically; return its directory.

    Args:
        plan: from :func:`plan_export`.
        model, tokenizer: the run's base model, already loaded (merge only); it is merged in
            place, so pass a copy you no longer need. Default: ``load_base`` of the run's model.

    Raises:
        ExportError: ``plan.out`` was filled since the plan was made.
        ModelNotFoundError: the base model cannot be loaded (merge only).
        RunDirLocked: another process holds the run directory's lock (it is held while ``final/``
            is read and the export written, so a resume never rewrites the adapters under it).
    """
    from evolora.run_dir import lock_run_dir

    with lock_run_dir(plan.run_dir):
        return _export_locked(plan, model=model, tokenizer=tokenizer)


def _export_locked(plan: ExportPlan, *, model: CausalLM | None, tokenizer: Tokenizer | None) -> Path:
    """The body of :func:`export_member`, run while this process holds the run directory's lock."""
    if plan.out.exists() and (not plan.out.is_dir() or any(plan.out.iterdir())):
        raise ExportError(f"{plan.out} already exists and is not empty; choose another --out or remove it")
    if plan.merge and model is None:
        from evolora.model import load_base

        model, tokenizer = load_base(plan.config.model.name, dtype="float32", num_threads=plan.config.model.num_threads)
    with atomic_path(plan.out, directory=True) as tmp:
        if plan.merge:
            _write_merged(plan, tmp, model, tokenizer)
        else:
            for name in ADAPTER_FILES:
                shutil.copy2(plan.adapter_dir / name, tmp / name)
        (tmp / "README.md").write_text(model_card(plan), encoding="utf-8")
        (tmp / "evolora_member.json").write_text(
            json.dumps(
                {
                    "run_dir": str(plan.run_dir.resolve()),
                    "member": plan.member,
                    "criterion": plan.criterion,
                    "merged": plan.merge,
                    "lineage": lineage_of(plan.summary, plan.member["id"]),
                },
                indent=2,
            )
        )
        for file in tmp.iterdir():  # some writers create 0600 files; exports get the usual mode
            file.chmod(0o666 & ~_umask())
    return plan.out


def _resolved_dtype(dtype: str) -> str:
    """The run's base dtype, ``auto`` resolved for this machine's CPU (export runs on the CPU)."""
    from evolora.model.dtype import auto_dtype

    return auto_dtype("cpu") if dtype == "auto" else dtype
