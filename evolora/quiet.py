"""Third-party noise off: warnings, logs below ERROR and progress bars of the ML libraries.

Only the command line calls :func:`quiet_libraries` (the library itself never changes global warning
filters or logging), and the Ray workers of a run started by a quiet command line: it sets
:data:`QUIET_ENV`, which the workers inherit and obey.
"""

from __future__ import annotations

import logging
import os
import warnings

QUIET_ENV = "EVOLORA_QUIET"
"""Set to ``1`` by a quiet command line; its Ray workers then silence their libraries too."""

NOISY_LIBRARIES = ("transformers", "torch", "peft", "accelerate", "huggingface_hub", "datasets", "safetensors")
"""Libraries whose warnings and progress bars a user of ``evolora evolve`` cannot act on."""


def quiet_libraries(verbose: bool = False) -> None:
    """Silence third-party warnings, logs below ERROR and progress bars for this process.

    Args:
        verbose: True leaves everything as the libraries set it (``evolora evolve --verbose``).

    Filters only warnings raised from inside :data:`NOISY_LIBRARIES` modules, so evolora's own
    warnings (e.g. a task without held-out data) still show.
    """
    if verbose:
        return
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # read when transformers / datasets are imported
    os.environ["TQDM_DISABLE"] = "1"  # plain tqdm bars too (transformers' GGUF conversion)
    os.environ[QUIET_ENV] = "1"  # Ray workers started from here read it (evolora.distributed.actor)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    pattern = r"(%s)(\.|$)" % "|".join(NOISY_LIBRARIES)
    for category in (FutureWarning, DeprecationWarning, UserWarning, RuntimeWarning):
        warnings.filterwarnings("ignore", category=category, module=pattern)
    for name in NOISY_LIBRARIES:
        logging.getLogger(name).setLevel(logging.ERROR)
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # in case transformers was imported before the variable was set
    transformers_logging.set_verbosity_error()
