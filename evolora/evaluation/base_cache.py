"""The bare base model's held-out answers, cached across runs.

Greedy decoding of a frozen model on a fixed item set is deterministic, so the base's answers of one
run's held-out evaluation serve every later run that asks the same question: the same model (its
path or id, a hash of the first values of every weight tensor, dtype and device type), the same items, the same prompts (token ids: template and task
wording), the same decoding (greedy, ``max_new_tokens``, the task's answer stop) and the same evolora
and torch versions. Those fields hash to a key; the answers live in
``<evolora cache dir>/held_out/<key>.json`` (:func:`evolora.model.cache_dir`). A run that finds its key
skips the base's rows, a third of a default gsm evaluation (docs/results/gsm.md), and its summary says
the base was cached. Source: PopuLoRA (arXiv 2605.16727) §4 (every member against the base).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from evolora._version import __version__
from evolora.io import write_text_atomic
from evolora.model import cache_dir

if TYPE_CHECKING:
    from evolora.bank import Bank


def base_key(bank: Bank, task, items: list, prompts: list[list[int]], max_new_tokens: int) -> str | None:
    """The cache key (64 hex digits) of the base's greedy answers to ``items``, or None when ``bank``
    holds no in-process model (Ray workers: nothing to name the weights by, so no cache).

    Args:
        bank: an :class:`evolora.bank.local.AdapterBank` (``bank.model`` is read for its name, dtype, device).
        task: the task (its name, held-out source and :attr:`~evolora.tasks.base.Task.answer_stop`).
        items: the held-out items (question and answer of each), in order.
        prompts: their prompt token ids, in the same order.
        max_new_tokens: the greedy token cap.
    """
    model = getattr(bank, "model", None)
    if model is None:
        return None
    parameter = next(model.parameters())
    weights = hashlib.sha256()  # the weights themselves: a tiny random model's name says nothing of its seed
    for name, tensor in model.named_parameters():
        if "lora_" in name:  # the members' factors, not the base
            continue
        weights.update(tensor.detach().flatten()[:64].float().cpu().numpy().tobytes())
    fields = {
        "evolora": __version__, "torch": torch.__version__,
        "model": str(getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", "")),
        "weights": weights.hexdigest(), "dtype": str(parameter.dtype), "device": parameter.device.type,
        "task": task.name, "source": task.held_out_source,
        "items": [[str(item.question), str(item.answer)] for item in items],
        "prompts": prompts, "greedy": True, "max_new_tokens": max_new_tokens,
        "stop": [getattr(stop, "pattern", stop) for stop in task.answer_stop],
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def _path(key: str) -> Path:
    return cache_dir() / "held_out" / f"{key}.json"


def load_base(key: str | None, total: int) -> tuple[list[str], list[str]] | None:
    """The cached (texts, labels) of ``total`` base answers under ``key``; None when there is none,
    or the file is unreadable or of another length (then the base is evaluated again)."""
    if key is None or not _path(key).is_file():
        return None
    try:
        cached = json.loads(_path(key).read_text())
        texts, labels = list(cached["texts"]), list(cached["labels"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (texts, labels) if len(texts) == len(labels) == total else None


def store_base(key: str | None, texts: list[str], labels: list[str]) -> None:
    """Write the base's answers under ``key`` (atomically; nothing when ``key`` is None). A cache
    directory that cannot be written is skipped: the cache only saves time."""
    if key is None:
        return
    try:
        _path(key).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(_path(key), json.dumps({"texts": texts, "labels": labels}))
    except OSError:
        pass
