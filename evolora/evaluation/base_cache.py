"""The bare base model's held-out answers, cached across runs.

Greedy decoding of a frozen model on a fixed item set is deterministic, so the base's answers of one
run's held-out evaluation serve every later run that asks the same question. The key covers everything
that decides an entry's content: the model (its path or id, the size and modification time of every
file of a local model directory, and a digest of the weights themselves: shape, sum, absolute sum and
first values of every tensor), dtype and device type, the tokenizer (class, vocabulary, special tokens,
chat template), the items (question and answer of each), the prompts (token ids: template and task
wording), the decoding (greedy, ``max_new_tokens``, the task's answer stop, the engine), the task (its
class, name, held-out source and every setting it was built with, grading ones such as
``task.params.tolerance`` included) and the evolora and torch versions. Those fields hash to a key; the
answers live in ``<evolora cache dir>/held_out/<key>.json`` (:func:`evolora.model.cache_dir`), each
entry with its key and a SHA-256 of its content, checked on every read: an entry that is damaged,
altered or of another key is never used: one log line says so, the base is evaluated again and the
entry rewritten. A run that finds its key skips the base's rows, a third of a default gsm evaluation
(docs/results/gsm.md), and its summary says the base was cached. Source: PopuLoRA (arXiv 2605.16727) §4
(every member against the base).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from evolora._version import __version__
from evolora.io import write_text_atomic
from evolora.model import cache_dir

if TYPE_CHECKING:
    from evolora.bank import Bank
    from evolora.hf_types import CausalLM, Tokenizer


FORMAT = 2
"""The layout of an entry: {"format", "key", "texts", "labels", "sha256"}; part of the key."""

log = logging.getLogger(__name__)


def base_key(
    bank: Bank, task, items: list, prompts: list[list[int]], max_new_tokens: int, *, tokenizer: Tokenizer | None = None
) -> str | None:
    """The cache key (64 hex digits) of the base's greedy answers to ``items``, or None when ``bank``
    holds no in-process model (Ray workers: nothing to name the weights by, so no cache).

    Args:
        bank: an :class:`evolora.bank.local.AdapterBank` (``bank.model`` is read for its name, files,
            weights, dtype and device; ``bank.engine`` for the decoding engine).
        task: the task (its class, name, held-out source, settings and
            :attr:`~evolora.tasks.base.Task.answer_stop`).
        items: the held-out items (question and answer of each), in order.
        prompts: their prompt token ids, in the same order.
        max_new_tokens: the greedy token cap.
        tokenizer: the tokenizer that decodes the answers (None: left out of the key).

    Returns:
        The key, or None.
    """
    model = getattr(bank, "model", None)
    if model is None:
        return None
    parameter = next(model.parameters())
    name = str(getattr(model, "name_or_path", "") or getattr(model.config, "_name_or_path", ""))
    engine = getattr(bank, "engine", None)
    fields = {
        "format": FORMAT,
        "evolora": __version__,
        "torch": torch.__version__,
        "model": name,
        "files": _file_identity(name),
        "weights": _weights_digest(model),
        "dtype": str(parameter.dtype),
        "device": parameter.device.type,
        "tokenizer": _tokenizer_identity(tokenizer),
        "task": task.name,
        "task_class": f"{type(task).__module__}.{type(task).__qualname__}",
        "task_settings": _task_settings(task),
        "source": task.held_out_source,
        "items": [[str(item.question), str(item.answer)] for item in items],
        "prompts": prompts,
        "greedy": True,
        "max_new_tokens": max_new_tokens,
        "stop": [getattr(stop, "pattern", stop) for stop in task.answer_stop],
        "engine": type(engine).__name__ if engine is not None else None,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=repr).encode()).hexdigest()


def _weights_digest(model: CausalLM) -> str:
    """SHA-256 over every base tensor (LoRA factors left out): its name, shape, float64 sum and absolute
    sum, and its first 64 values, so a change anywhere in a tensor changes the digest."""
    digest = hashlib.sha256()
    for name, tensor in model.named_parameters():
        if "lora_" in name:  # the members' factors, not the base
            continue
        flat = tensor.detach().flatten()
        sums = torch.stack([flat.sum(dtype=torch.float64), flat.abs().sum(dtype=torch.float64)]).cpu()
        digest.update(f"{name}:{tuple(tensor.shape)}".encode())
        digest.update(sums.numpy().tobytes())
        digest.update(flat[:64].float().cpu().numpy().tobytes())
    return digest.hexdigest()


def _file_identity(name: str) -> list:
    """[file name, size, modification time (ns)] of every file of a local model directory ``name``
    (weights, config, tokenizer); [] for an id or a name that is no directory."""
    try:
        path = Path(name)
        if not name or not path.is_dir():
            return []
        return [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in sorted(path.iterdir()) if p.is_file()]
    except OSError:
        return []


def _tokenizer_identity(tokenizer: Tokenizer | None) -> dict | None:
    """Class, vocabulary digest, special tokens and chat template of ``tokenizer`` (None: None)."""
    if tokenizer is None:
        return None
    try:
        vocab = sorted(tokenizer.get_vocab().items())
    except (AttributeError, NotImplementedError, TypeError):
        vocab = None
    template = getattr(tokenizer, "chat_template", None)
    return {
        "class": type(tokenizer).__qualname__,
        "vocab": hashlib.sha256(json.dumps(vocab, default=repr).encode()).hexdigest(),
        "special": [str(getattr(tokenizer, f"{t}_token_id", None)) for t in ("bos", "eos", "pad")],
        "chat_template": template if isinstance(template, str) else repr(template),
    }


def _task_settings(task) -> dict:
    """The task's public settings that are JSON values (numbers, strings, flags, lists and mappings of
    them): what it was built with, its grading settings (e.g. ``tolerance``) included."""
    settings = {}
    for name, value in sorted(vars(task).items()):
        if name.startswith("_"):
            continue
        try:
            settings[name] = json.loads(json.dumps(value, sort_keys=True))
        except (TypeError, ValueError):
            continue  # an object (a data set, a pool): its content is in the items and prompts
    return settings


def _path(key: str) -> Path:
    return cache_dir() / "held_out" / f"{key}.json"


def _content_hash(key: str, texts: list, labels: list) -> str:
    """SHA-256 of an entry's key, texts and labels: what :func:`load_base` checks on every read."""
    return hashlib.sha256(
        json.dumps({"key": key, "texts": texts, "labels": labels}, sort_keys=True).encode()
    ).hexdigest()


def load_base(key: str | None, total: int) -> tuple[list[str], list[str]] | None:
    """The cached (texts, labels) of ``total`` base answers under ``key``.

    Args:
        key: from :func:`base_key` (None: no cache).
        total: the number of items asked.

    Returns:
        (texts, labels), or None when there is no entry, or its entry is unreadable, damaged, altered
        (its content does not match its SHA-256), of another key or format, or of another length: then
        one warning line (logger ``evolora.evaluation.base_cache``) names the file and why, and the
        caller evaluates the base again and rewrites the entry.
    """
    if key is None or not _path(key).is_file():
        return None
    path = _path(key)
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        problem = _problem(cached, key, total)
    except (OSError, UnicodeDecodeError) as error:
        problem = f"unreadable: {getattr(error, 'strerror', None) or error}"
    except ValueError:
        problem = "damaged: not JSON"
    if problem is not None:
        log.warning(f"the base-answer cache entry {path} is not used ({problem}); evaluating the base again")
        return None
    return list(cached["texts"]), list(cached["labels"])


def _problem(cached, key: str, total: int) -> str | None:
    """Why the entry ``cached`` (parsed JSON) cannot serve ``total`` answers under ``key``, or None."""
    if not isinstance(cached, dict) or cached.get("format") != FORMAT:
        return f"format {cached.get('format') if isinstance(cached, dict) else None!r}, not {FORMAT}"
    if cached.get("key") != key:
        return "it holds another key"
    texts, labels = cached.get("texts"), cached.get("labels")
    if not (isinstance(texts, list) and isinstance(labels, list) and all(isinstance(t, str) for t in texts + labels)):
        return "its answers are not lists of strings"
    if cached.get("sha256") != _content_hash(key, texts, labels):
        return "its content does not match its SHA-256"
    if not len(texts) == len(labels) == total:
        return f"{len(texts)} answers and {len(labels)} grades for {total} items"
    return None


def store_base(key: str | None, texts: list[str], labels: list[str]) -> None:
    """Write the base's answers under ``key`` with their content hash (atomically; nothing when ``key``
    is None). A cache directory that cannot be written is skipped: the cache only saves time.

    Args:
        key: from :func:`base_key`.
        texts: the base's answer texts, in item order.
        labels: their grades, in the same order.
    """
    if key is None:
        return
    texts, labels = list(texts), list(labels)
    entry = {
        "format": FORMAT,
        "key": key,
        "texts": texts,
        "labels": labels,
        "sha256": _content_hash(key, texts, labels),
    }
    try:
        _path(key).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(_path(key), json.dumps(entry))
    except OSError:
        pass
