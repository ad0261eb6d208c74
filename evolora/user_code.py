"""Code of the user's own, named in a config (``module:attr``), failing with its name.

A user's task, engine, operator or play that raises, or returns what breaks its contract, is
reported as a :class:`UserCodeError`: one line naming the config key, the code, the method, what
went wrong and the contract it must keep. The command line prints it in at most 3 lines
(``--verbose`` adds the traceback) and exits 2; the run's last checkpoint is intact, so it resumes
once the code is fixed. One guard serves every kind::

    code = UserCode("generation.engine", "my_pkg.engines:MyEngine", CONTRACT)
    with code.call(when="while it was built"):       # any exception -> UserCodeError, chained
        engine = cls(model, tokenizer, bank)
    engine.generate = code.guard(engine.generate, "generate", check=check_generate)

evolora's own exceptions that steer a run (a lost Ray worker, a user's code already named) derive
from :class:`PassesUserCode` and go through a guard unchanged. Nothing here imports the rest of the
package (the registry and the distributed backend build on it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

Check = Callable[[Any, tuple, dict], "str | None"]
"""``check(result, args, kwargs)``: what is wrong with a call's result (a short phrase starting
with ``returned``), or None when it keeps the contract."""


class PassesUserCode(Exception):
    """An evolora exception that a guard lets through a user's code unchanged: control flow of a run
    (:class:`evolora.distributed.recovery.WorkerLost`, which repeats the step) or a user's code
    already named (:class:`UserCodeError` of a task that a user's play called)."""


class UserCodeError(PassesUserCode, RuntimeError):
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


def is_users(target: object) -> bool:
    """Whether ``target`` (a class or function) is defined outside the ``evolora`` package."""
    module = getattr(target, "__module__", None) or ""
    return not (module == "evolora" or module.startswith("evolora."))


def argument(args: tuple, kwargs: dict, index: int, name: str) -> Any:
    """A guarded call's argument ``name``, given at position ``index`` or by keyword (None if neither),
    for a :data:`Check`."""
    return args[index] if len(args) > index else kwargs.get(name)


@dataclass(frozen=True)
class UserCode:
    """One piece of a user's code as a config names it, and the guard of every call into it.

    Attributes:
        key: the config key that names it: ``task.name``, ``generation.engine``,
            ``evolution.<kind>`` or ``selfplay.plays``.
        name: its name there, ``package.module:attr`` (or the name it was registered under).
        contract: what it must take and return, quoted in every error.
    """

    key: str
    name: str
    contract: str

    def error(self, method: str, problem: str) -> UserCodeError:
        """The :class:`UserCodeError` of ``problem`` in ``method`` ("" for the callable itself)."""
        return UserCodeError(self.key, self.name, " ".join(filter(None, (method, problem))), self.contract)

    @contextmanager
    def call(self, method: str = "", *, when: str = "") -> Iterator[None]:
        """Run the block as a call into the user's code: any exception but a :class:`PassesUserCode`
        becomes a :class:`UserCodeError` naming ``method`` and the exception's type and first line,
        chained to it (``from``); ``when`` ends the phrase, e.g. ``while it was built``.

        Raises:
            UserCodeError: e.g. ``generation.engine 'my_pkg.engines:MyEngine' generate raised
                KeyError: 'cuda:7'; the contract: ...``.
        """
        try:
            yield
        except PassesUserCode:
            raise
        except Exception as error:  # the user's code: any other exception is its own failure
            problem = " ".join(filter(None, (describe_exception(error), when)))
            raise self.error(method, problem) from error

    def guard(self, function: Callable, method: str = "", check: Check | None = None) -> Callable:
        """``function`` called under :meth:`call` (``method`` names it, "" for the callable itself),
        its result checked by ``check`` (:data:`Check`); the wrapper keeps ``function``'s name and
        docstring and is marked ``__evolora_guarded__``.

        Raises:
            UserCodeError: (when the wrapper is called) ``function`` raised, or ``check`` found a problem.
        """

        @functools.wraps(function)
        def guarded(*args, **kwargs):
            with self.call(method):
                result = function(*args, **kwargs)
            problem = check(result, args, kwargs) if check is not None else None
            if problem is not None:
                raise self.error(method, problem)
            return result

        guarded.__evolora_guarded__ = True
        return guarded
