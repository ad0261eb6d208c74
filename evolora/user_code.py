"""Code of the user's own, named in a config (``module:function``), failing with its name.

A user's function that raises, or returns what breaks its contract, is reported as a
:class:`UserCodeError`: one line naming the config key, the function, what went wrong and the
contract it must keep. The command line prints it in at most 3 lines (``--verbose`` adds the
traceback) and exits 2; the run's last checkpoint is intact, so it resumes once the code is fixed.
"""

from __future__ import annotations


class UserCodeError(RuntimeError):
    """A user's function named in a config raised, or returned a result that breaks its contract.

    Args:
        key: the config key that names it, e.g. ``evolution.mutation``.
        name: the name it was given, e.g. ``my_ops:my_mutation``.
        problem: what went wrong, e.g. ``raised ZeroDivisionError: division by zero``.
        contract: what the function must take and return.
    """

    def __init__(self, key: str, name: str, problem: str, contract: str) -> None:
        self.key, self.name, self.problem, self.contract = key, name, problem, contract
        super().__init__(f"{key} {name!r} {problem}; the contract: {contract}")


def describe_exception(error: BaseException, *, size: int = 200) -> str:
    """``"raised TypeName: first line of its message"``, at most ``size`` characters of message.

    >>> describe_exception(ValueError("bad\\nvalue"))
    'raised ValueError: bad'
    """
    text = (str(error).strip().splitlines() or [""])[0]
    if len(text) > size:
        text = text[: size - 3] + "..."
    return f"raised {type(error).__name__}" + (f": {text}" if text else "")
