"""Run untrusted, model-written Python in a separate, limited process.

Defence in depth, cheapest layer first: the static check of :mod:`evolora.sandbox.policy`
(``check_source``), then a child process set up by :mod:`evolora.sandbox.executor`
(``run_program``, ``SandboxPool``) whose boot script (:mod:`evolora.sandbox.boot`) sets resource
limits and filters builtins and imports before the program runs. The threat model is in
README.md, "Security model".
"""

from __future__ import annotations

from evolora.sandbox.executor import PYTHON, SandboxPool, SandboxResult, Status, run_program
from evolora.sandbox.policy import ALLOWED_MODULES, BANNED_NAMES, MAX_SOURCE_CHARS, check_source

__all__ = [
    "ALLOWED_MODULES",
    "BANNED_NAMES",
    "MAX_SOURCE_CHARS",
    "PYTHON",
    "SandboxPool",
    "SandboxResult",
    "Status",
    "check_source",
    "run_program",
]
