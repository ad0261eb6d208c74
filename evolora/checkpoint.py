"""Resumable checkpoints, written atomically into ``RUN_DIR/checkpoints/step_NNNNNN/``.

A checkpoint holds every slot's LoRA factors (safetensors), every optimizer state,
the population with its lineage, the ratings, and the counts of log records written, plus
``manifest.json``: the size and SHA-256 of each of those files. A checkpoint whose files do not
match its manifest (truncated, edited, half-copied) is skipped on resume in favour of the
newest intact one. Random state needs no saving: every step seeds its generators from
(run seed, step) (:mod:`evolora.streams`). Checkpoints are device-independent: every tensor is written from the CPU and
read onto the device the loader names (a run checkpointed on a GPU resumes on a CPU and back).
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import warnings
from pathlib import Path

import torch
from safetensors.torch import load_file, save

from evolora.io import atomic_path

CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"
FILES = ("factors.safetensors", "optimizers.pt", "state.json")


class CheckpointError(RuntimeError):
    """A run has checkpoints but none of them is intact."""


def _digest(path: Path) -> dict:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return {"bytes": path.stat().st_size, "sha256": sha.hexdigest()}


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)


def checkpoint_problem(path: Path) -> str | None:
    """Why checkpoint directory ``path`` cannot be trusted, or None when it is intact.

    Checks that every file of :data:`FILES` exists with the size and SHA-256 its manifest
    records. A checkpoint written before manifests existed passes when its files exist.
    """
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text()) if (path / MANIFEST).exists() else None
    except (OSError, ValueError):
        return f"{MANIFEST} is unreadable"
    for name in FILES:
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        if manifest is not None:
            expected = manifest.get(name) if isinstance(manifest, dict) else None
            if expected is None:
                return f"{MANIFEST} does not list {name}"
            if file.stat().st_size != expected.get("bytes") or _digest(file) != expected:
                return f"{name} does not match its SHA-256 in {MANIFEST} (truncated or changed)"
    return None


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
    tensors = {
        f"{slot}|{module}|{name}": t.detach().to("cpu").contiguous()
        for slot, adapter in factors.items()
        for module, pair in adapter.items()
        for name, t in zip("AB", pair)
    }
    buffer = io.BytesIO()
    torch.save(_on_cpu(optimizers), buffer)
    contents = {
        "factors.safetensors": save(tensors),
        "optimizers.pt": buffer.getvalue(),
        "state.json": json.dumps({"step": step, **state}, indent=1).encode(),
    }
    with atomic_path(target, directory=True) as tmp:
        for name, data in contents.items():  # serialised in memory first: a full disk is a plain OSError
            _write(tmp / name, data)
        manifest = {
            name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()} for name, data in contents.items()
        }  # hashed from memory, not read back
        _write(tmp / MANIFEST, json.dumps(manifest, indent=1).encode())
    for old in sorted(root.glob("step_*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest intact checkpoint directory of a run (see :func:`checkpoint_problem`).

    Each damaged newer checkpoint is skipped with a ``UserWarning`` naming it.

    Returns:
        None when the run has no checkpoint yet.

    Raises:
        CheckpointError: checkpoints exist but none is intact.
    """
    root = Path(run_dir) / CHECKPOINTS
    found = sorted(root.glob("step_*"))
    for path in reversed(found):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        warnings.warn(f"checkpoint {path} is damaged ({problem}); trying an older one", stacklevel=2)
    if found:
        raise CheckpointError(
            f"no intact checkpoint in {root} ({len(found)} damaged); the run cannot be "
            f"resumed: start it again with another --out"
        )
    return None


def _on_cpu(value):
    """``value`` (nested dicts, lists, tuples) with every tensor copied to the CPU: the file then
    names no device."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu")
    if isinstance(value, dict):
        return {key: _on_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(item) for item in value)
    return value


def load_checkpoint(path: Path, *, device: torch.device | str = "cpu") -> tuple[dict, dict, dict]:
    """Read a checkpoint: (factors {slot: {module: (A, B)}}, optimizer states, state), every tensor
    placed on ``device`` by this loader (``map_location``), whatever device wrote the file.

    Args:
        path: a checkpoint directory; device: where the tensors go (the run's model device).

    Raises:
        CheckpointError: the checkpoint fails :func:`checkpoint_problem`.
    """
    problem = checkpoint_problem(path)
    if problem is not None:
        raise CheckpointError(f"checkpoint {path} is damaged ({problem})")
    path = Path(path)
    tensors = {key: tensor.to(device) for key, tensor in load_file(str(path / "factors.safetensors")).items()}
    factors: dict = {}
    for key, tensor in tensors.items():
        slot, module, name = key.split("|")
        factors.setdefault(slot, {}).setdefault(module, [None, None])["AB".index(name)] = tensor
    factors = {slot: {m: tuple(pair) for m, pair in adapter.items()} for slot, adapter in factors.items()}
    optimizers = torch.load(path / "optimizers.pt", weights_only=True, map_location=device)
    state = json.loads((path / "state.json").read_text())
    return factors, optimizers, state
