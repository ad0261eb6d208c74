"""``model.device``: where the base model, the adapters and every tensor of a run live.

    resolve_device("auto")     # "cuda" when torch sees a GPU, else "cpu"
    resolve_device("cuda:1")   # "cuda:1" when torch sees at least 2 GPUs, else ValueError
    model_device(bank.model)   # torch.device of a module's parameters

The device is resolved once, before any model loads (a config asking for a GPU that is not
there is refused then, with one line); the loader moves the model there, and every tensor,
KV cache, sampling RNG and reward tensor of a step is made on the model's device
(``tests/test_device.py`` finds any factory call without one). Source: PopuLoRA (arXiv
2605.16727) §2 (one frozen base shared by every adapter).
"""

from __future__ import annotations

import re

import torch

DEVICE_PATTERN = r"^(auto|cpu|cuda(:\d+)?)$"
"""The spellings of ``model.device``: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (the config checks them with it)."""


def resolve_device(device: str) -> str:
    """The concrete device of ``model.device``: ``auto`` → ``cuda`` when torch sees a GPU, else ``cpu``.

    Args:
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (N counts from 0).

    Returns:
        ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.

    Raises:
        ValueError: an unknown spelling, ``cuda`` when torch sees no GPU, or ``cuda:N`` beyond the
            GPUs torch sees; one line that says what to set.
    """
    if not re.match(DEVICE_PATTERN, device):
        raise ValueError(f"model.device must be auto, cpu, cuda or cuda:N, got {device!r}")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(f"model.device={device} but torch sees no CUDA GPU here; set model.device=cpu or auto")
        index = int(device.partition(":")[2] or 0)
        if index >= count:
            raise ValueError(
                f"model.device={device} but torch sees {count} GPU(s) (cuda:0 to cuda:{count - 1}); "
                f"set model.device=cuda:{count - 1} or lower"
            )
    return device


def model_device(module: torch.nn.Module) -> torch.device:
    """The device of ``module``'s first parameter (a model moved whole: every parameter's device).

    Raises:
        ValueError: ``module`` has no parameters.
    """
    for parameter in module.parameters():
        return parameter.device
    raise ValueError(f"{type(module).__name__} has no parameters to tell its device by")


def generator_on(generator: torch.Generator | None, device: torch.device | str) -> torch.Generator | None:
    """A sampling generator on ``device``: ``generator`` itself when it is there already, else a new
    one on ``device`` seeded with ``generator.initial_seed()`` (a generator's state does not carry
    across device types; its seed does). None stays None (the device's default generator).

    >>> generator_on(torch.Generator(device="cpu").manual_seed(7), "cpu").initial_seed()
    7
    """
    if generator is None or generator.device == torch.device(device):
        return generator
    return torch.Generator(device=device).manual_seed(generator.initial_seed())
