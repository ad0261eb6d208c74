"""The close match of a misspelled name, so that an error can name the fix (``did you mean 'selection'?``)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: object, choices: Iterable[object]) -> str:
    """``"did you mean 'x'? "`` for the choice closest to ``name``, or ``""`` when none is close.

    Args:
        name: what the user wrote (a key, an operator or task name); compared as text.
        choices: the names allowed there.

    Returns:
        The phrase with one trailing space, to put before the list of what is allowed; close means
        a :func:`difflib.get_close_matches` ratio of at least 0.6 (``selction`` → ``selection``,
        ``stepz`` → ``steps``; ``abc`` matches nothing among ``steps, seed``).

    >>> did_you_mean("selction", ["every", "selection", "crossover"])
    "did you mean 'selection'? "
    >>> did_you_mean("xyz", ["every", "selection"])
    ''
    """
    match = difflib.get_close_matches(str(name), [str(choice) for choice in choices], n=1, cutoff=0.6)
    return f"did you mean {match[0]!r}? " if match else ""
