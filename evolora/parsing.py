"""Parsing model-written text: what it can raise and the code fence it looks for, named once.

``ast.parse`` (and ``compile``) on model-written text raises more than :class:`SyntaxError`: a
null byte gives :class:`ValueError`, deep nesting :class:`RecursionError` or
:class:`MemoryError`. Every verifier, analytic and sandbox check that parses a proposal catches
:data:`PARSE_ERRORS`, so one more kind is added here and nowhere else.
"""

from __future__ import annotations

import re

PARSE_ERRORS: tuple[type[BaseException], ...] = (SyntaxError, ValueError, RecursionError, MemoryError)
"""The exceptions that mean "this text does not parse" (never a bug of ours)."""

FENCE = re.compile(r"```[ \t]*(?:(?:python3?|py)[ \t]*)?\r?\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
"""A Markdown code fence (optionally tagged python); a missing closing fence is tolerated. The one
fence pattern of the code and gsm tasks, linear: the optional tag sits between the two runs of
spaces, so no two quantifiers can match the same characters."""
