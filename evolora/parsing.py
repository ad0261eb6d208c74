"""What parsing untrusted text can raise, named once.

``ast.parse`` (and ``compile``) on model-written text raises more than :class:`SyntaxError`: a
null byte gives :class:`ValueError`, deep nesting :class:`RecursionError` or
:class:`MemoryError`. Every verifier, analytic and sandbox check that parses a proposal catches
:data:`PARSE_ERRORS`, so one more kind is added here and nowhere else.
"""

from __future__ import annotations

PARSE_ERRORS: tuple[type[BaseException], ...] = (SyntaxError, ValueError, RecursionError, MemoryError)
"""The exceptions that mean "this text does not parse" (never a bug of ours)."""
