"""Resumable checkpoints, written atomically into ``RUN_DIR/checkpoints/step_NNNNNN/``.

A checkpoint holds every slot's LoRA factors (safetensors), every optimizer state,
the population with its lineage, the ratings, and the counts of log records written.
Random state needs no saving: every step seeds its generators from (run seed, step).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from evolora.io import atomic_path

CHECKPOINTS = "checkpoints"


def save_checkpoint(run_dir: Path, step: int, *, factors: dict, optimizers: dict, state: dict, keep: int = 2) -> Path:
    """Write checkpoint ``step`` atomically and keep only the newest ``keep`` checkpoints.

    Args:
        factors: {slot: {module: (A, B)}}; optimizers: {individual id: optimizer state_dict};
        state: JSON-serialisable run state (population, ratings, lineage, counters).

    Returns:
        The checkpoint directory.
    """
    root = Path(run_dir) / CHECKPOINTS
    target = root / f"step_{step:06d}"
    tensors = {f"{slot}|{module}|{name}": t.contiguous() for slot, adapter in factors.items()
               for module, pair in adapter.items() for name, t in zip("AB", pair)}
    with atomic_path(target, directory=True) as tmp:
        save_file(tensors, str(tmp / "factors.safetensors"))
        torch.save(optimizers, tmp / "optimizers.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=1))
    for old in sorted(root.glob("step_*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint directory of a run, or None."""
    root = Path(run_dir) / CHECKPOINTS
    done = [p for p in sorted(root.glob("step_*")) if (p / "state.json").exists()]
    return done[-1] if done else None


def load_checkpoint(path: Path) -> tuple[dict, dict, dict]:
    """Read a checkpoint: (factors {slot: {module: (A, B)}}, optimizer states, state)."""
    path = Path(path)
    tensors = load_file(str(path / "factors.safetensors"))
    factors: dict = {}
    for key, tensor in tensors.items():
        slot, module, name = key.split("|")
        factors.setdefault(slot, {}).setdefault(module, [None, None])["AB".index(name)] = tensor
    factors = {slot: {m: tuple(pair) for m, pair in adapter.items()} for slot, adapter in factors.items()}
    optimizers = torch.load(path / "optimizers.pt", weights_only=True)
    state = json.loads((path / "state.json").read_text())
    return factors, optimizers, state
