"""One-time conversion of a GGUF checkpoint into a safetensors directory (atomic, locked).

transformers dequantizes GGUF to fp32 on load but refuses to ``save_pretrained`` a model it
still marks as quantized; clearing the quantizer state lets it save (the weights are plain
fp32 tensors by then, so nothing is lost).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import torch


def is_converted(directory: Path) -> bool:
    return (directory / "config.json").is_file() and (directory / "model.safetensors").is_file()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Exclusive advisory lock on ``path`` (POSIX); a no-op where ``fcntl`` is missing."""
    try:
        import fcntl
    except ImportError:  # Windows: the atomic rename alone keeps the cache whole
        yield
        return
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _quiet_unless_verbose() -> Iterator[None]:
    """Send stderr (tqdm's bars) nowhere while a quiet command line runs (:data:`evolora.quiet.QUIET_ENV`
    set, i.e. no ``--verbose``); errors still raise."""
    from evolora.quiet import QUIET_ENV

    if os.environ.get(QUIET_ENV) != "1":
        yield
        return
    with open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink):
        yield


def convert_gguf(gguf_file: Path, destination: Path) -> None:
    """Dequantize ``gguf_file`` to fp32 and save it with its tokenizer as safetensors.

    Writes into a temporary sibling directory and renames it into place, so a crash never leaves
    a half-written cache; a lock file makes a second concurrent first run wait and reuse it.
    """
    from rich.console import Console
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils.quantization_config import GgufConfig

    destination.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(destination.parent / f".{destination.name}.lock"):
        if is_converted(destination):  # another process finished while we waited
            return
        console = Console(stderr=True, soft_wrap=True)
        console.print(f"converting {gguf_file.stem.split('.')[0]} GGUF to safetensors in {destination} "
                      "(once, ~20 s) ...", end="", highlight=False)
        start = time.perf_counter()
        source, file_name = str(gguf_file.parent), gguf_file.name
        with _quiet_unless_verbose():  # transformers' per-tensor progress bar
            model = AutoModelForCausalLM.from_pretrained(
                source,
                gguf_file=file_name,
                quantization_config=GgufConfig(gguf_file=file_name, dequantize=True),
                dtype=torch.float32,
            )
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=file_name)
        # save_pretrained refuses gguf-quantized models; the weights are dense fp32 by now.
        model.hf_quantizer = None
        model.is_quantized = False
        model.quantization_method = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        # mkdir (not mkdtemp) so the cache gets the usual umask permissions, not 0700
        temporary = destination.parent / f".{destination.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
        temporary.mkdir()
        try:
            model.save_pretrained(temporary)
            tokenizer.save_pretrained(temporary)
            if destination.exists():  # a stale, incomplete copy from an older layout
                shutil.rmtree(destination)
            os.replace(temporary, destination)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        console.print(f" done in {time.perf_counter() - start:.0f} s", highlight=False)
