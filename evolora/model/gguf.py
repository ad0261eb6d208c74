"""One-time conversion of a GGUF checkpoint into a safetensors directory (atomic, locked, with a
manifest that proves what it holds: :mod:`evolora.model.converted`).

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

from evolora.model.converted import entry_problem, source_identity, write_manifest


def is_converted(directory: Path) -> bool:
    """Whether ``directory`` holds a converted model whose manifest, key and file sizes match (a cheap
    look: nothing is hashed; :func:`evolora.model.converted.entry_problem` with ``full=True`` hashes)."""
    return entry_problem(directory, full=False) is None


def say(text: str, **print_options) -> None:
    """Print ``text`` on stderr (the conversion's one-line notes)."""
    from rich.console import Console

    Console(stderr=True, soft_wrap=True).print(text, highlight=False, **print_options)


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

    Writes into a temporary sibling directory, with the manifest of :mod:`evolora.model.converted`
    (the GGUF file's identity, recipe, dtype, transformers version, each file's SHA-256), and renames
    it into place, replacing an entry that does not pass :func:`~evolora.model.converted.entry_problem`;
    a crash never leaves a half-written cache. A lock file makes a second concurrent first run wait
    and reuse it.

    Raises:
        OSError: the cache folder cannot be written (nothing is left behind).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils.quantization_config import GgufConfig

    destination.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(destination.parent / f".{destination.name}.lock"):
        identity = source_identity(gguf_file)
        if entry_problem(destination, identity) is None:  # another process finished while we waited
            return
        say(f"converting {gguf_file.stem.split('.')[0]} GGUF to safetensors in {destination} (once, ~20 s) ...", end="")
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
            write_manifest(temporary, identity)
            if destination.exists():  # a damaged entry, or one of another key
                shutil.rmtree(destination)
            os.replace(temporary, destination)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        say(f" done in {time.perf_counter() - start:.0f} s")
