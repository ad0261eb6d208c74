"""evolora's version, in a module of its own: the package root, ``pyproject.toml`` and the modules that
record it (e.g. :mod:`evolora.evaluation.base_cache`) read it here, without importing the package root."""

__version__ = "0.1.0"
