"""The sandbox's static policy: which Python a model may run, checked on the AST before any process starts.

``check_source`` rejects imports outside a small allowlist of pure-computation modules,
dangerous builtins, dunder and private attribute access, attributes that lead back to
banned modules, and helpers that evaluate strings with the real builtins. The runtime
layers (limits, audit hook, namespaces) live in :mod:`evolora.sandbox`.

Source: Absolute Zero Reasoner (arXiv 2505.03335) executor checks (banned modules and
builtins before a proposed program runs); the threat model is in README.md, "Security model".
"""

from __future__ import annotations

import _string
import ast
import string

from evolora.parsing import PARSE_ERRORS

ALLOWED_MODULES = frozenset(
    {
        "math",
        "cmath",
        "fractions",
        "decimal",
        "numbers",
        "itertools",
        "functools",
        "operator",
        "collections",
        "statistics",
        "re",
        "string",
        "heapq",
        "bisect",
        "datetime",
        "json",
        "copy",
        "typing",
        "dataclasses",
        "enum",
    }
)
"""Top-level modules a program may import: pure computation, no I/O, no clock, no RNG."""

BANNED_NAMES = frozenset(
    {
        "__import__",
        "eval",
        "exec",
        "compile",
        "open",
        "input",
        "globals",
        "locals",
        "vars",
        "getattr",
        "setattr",
        "delattr",
        "hasattr",
        "breakpoint",
        "exit",
        "quit",
        "help",
        "memoryview",
        "copyright",
        "credits",
        "license",
    }
)
"""Builtin names a program may neither use nor find in its ``__builtins__``."""

BANNED_ATTRIBUTES = frozenset(
    {
        # modules reachable as attributes of allowed modules (statistics.sys, enum.bltns,
        # dataclasses.inspect, json.codecs, typing.types, collections.abc.sys, ...)
        "sys",
        "os",
        "builtins",
        "bltns",
        "inspect",
        "random",
        "types",
        "warnings",
        "codecs",
        "io",
        "importlib",
        "machinery",
        "ast",
        "dis",
        "linecache",
        "tokenize",
        "contextlib",
        "copyreg",
        "stdlib_re",
        "subprocess",
        "socket",
        "shutil",
        "ctypes",
        "gc",
        "resource",
        "signal",
        "threading",
        "multiprocessing",
        "pickle",
        "marshal",
        # getattr in disguise, clocks, frame and code internals
        "attrgetter",
        "methodcaller",
        "now",
        "today",
        "utcnow",
        "gi_frame",
        "gi_code",
        "cr_frame",
        "cr_code",
        "ag_frame",
        "ag_code",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_back",
        "tb_frame",
        "co_code",
        # helpers that evaluate strings with the real builtins: typing.get_type_hints (and
        # functools.singledispatch, which calls it) evaluate string annotations with ``{}`` as
        # globals; string.Formatter resolves attribute paths like str.format does
        "get_type_hints",
        "ForwardRef",
        "singledispatch",
        "singledispatchmethod",
        "Formatter",
        "vformat",
        "get_field",
        "format_map",
    }
)
"""Attribute names refused on any object (and as ``from m import name``): ways back to
banned modules, getattr-like helpers, clocks (``datetime.now``) and frame internals.
``re.compile`` and ``datetime.time`` stay allowed."""

"""What ``ast.parse`` raises on bad source: ValueError for null bytes or surrogates,
RecursionError/MemoryError for pathological nesting (``"-" * 10**6 + "1"``)."""
MAX_SOURCE_CHARS = 100_000
"""Longer sources are refused with status "error" before parsing."""
_FORMATTER = string.Formatter()
_ALLOWED_DUNDER_ATTRIBUTES = frozenset({"__init__"})  # only as ``super().__init__``
_HARMLESS_DUNDER_STRINGS = frozenset({"__main__", "__name__", "__init__"})


def check_source(source: str, *, allow_input: bool = False) -> str | None:
    """Statically check a program before it runs.

    Args:
        source: Python source text.
        allow_input: also allow the builtin ``input`` (``run_program`` sets it when the
            caller supplies ``stdin``).

    Returns:
        A short human-readable reason when the program is refused, else None. Source that
        does not parse also returns None: the interpreter reports the SyntaxError
        (``run_program`` maps it to status "error" without starting a process).

    >>> check_source("import math\\nprint(math.sqrt(16))") is None
    True
    >>> check_source("import os")
    "import of module 'os' is not allowed"
    >>> check_source("print(().__class__)")
    "dunder attribute '__class__' is not allowed"
    """
    try:
        tree = ast.parse(source)
    except PARSE_ERRORS:
        return None
    main_guards = _main_guard_names(tree)
    banned_names = BANNED_NAMES - {"input"} if allow_input else BANNED_NAMES
    for node in ast.walk(tree):
        reason = _check_node(node, main_guards, banned_names)
        if reason is not None:
            return reason
    return None


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _main_guard_names(tree: ast.AST) -> set[int]:
    """ids of ``__name__`` Name nodes inside ``if __name__ == "__main__"`` tests."""
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            test = node.test
            operands = [test.left, *test.comparators]
            if (
                len(operands) == 2
                and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
                and any(isinstance(o, ast.Constant) and o.value == "__main__" for o in operands)
            ):
                allowed.update(id(o) for o in operands if isinstance(o, ast.Name) and o.id == "__name__")
    return allowed


def _check_module(name: str | None, level: int) -> str | None:
    if level:
        return "relative imports are not allowed"
    top = (name or "").split(".")[0]
    if top not in ALLOWED_MODULES:
        return f"import of module {top!r} is not allowed"
    return None


def _check_node(node: ast.AST, main_guards: set[int], banned_names: frozenset[str]) -> str | None:  # noqa: C901 (one branch per refused node kind)
    if isinstance(node, ast.Import):
        for alias in node.names:
            if (reason := _check_module(alias.name, 0)) is not None:
                return reason
    elif isinstance(node, ast.ImportFrom):
        if (reason := _check_module(node.module, node.level)) is not None:
            return reason
        for alias in node.names:
            if alias.name == "*" or alias.name.startswith("_") or alias.name in BANNED_ATTRIBUTES:
                return f"importing {alias.name!r} from {node.module!r} is not allowed"
    elif isinstance(node, ast.Name):
        if node.id in banned_names:
            return f"name {node.id!r} is not allowed"
        if _is_dunder(node.id) and id(node) not in main_guards:
            return f"dunder name {node.id!r} is not allowed"
    elif isinstance(node, ast.Attribute):
        attr = node.attr
        if _is_dunder(attr):
            if not (attr in _ALLOWED_DUNDER_ATTRIBUTES and _is_super_call(node.value)):
                return f"dunder attribute {attr!r} is not allowed"
        elif (reason := _check_attribute_name(attr)) is not None:
            return reason
        elif attr == "format" and not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            # str.format follows attribute paths ("{0.x.y}"); only literal templates,
            # whose fields are checked below, may be formatted
            return "str.format is only allowed on a string literal"
    elif isinstance(node, ast.MatchClass):
        # ``case object(__class__=c)`` reads attributes without an ast.Attribute node
        for attr in node.kwd_attrs:
            if (reason := _check_attribute_name(attr)) is not None:
                return f"match pattern: {reason}"
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        if "__" in node.value and any(_is_dunder(w) and w not in _HARMLESS_DUNDER_STRINGS for w in _words(node.value)):
            return "string constants naming dunder attributes are not allowed"
        if "{" in node.value and (reason := _check_format_fields(node.value)) is not None:
            return reason
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        if any(_is_dunder(n) for n in node.names):
            return "dunder globals are not allowed"
    elif isinstance(node, ast.alias):
        if node.asname and _is_dunder(node.asname):
            return f"dunder alias {node.asname!r} is not allowed"
    return None


def _check_attribute_name(attr: str) -> str | None:
    if _is_dunder(attr):
        return f"dunder attribute {attr!r} is not allowed"
    if attr.startswith("_"):
        return f"private attribute {attr!r} is not allowed"
    if attr in BANNED_ATTRIBUTES:
        return f"attribute {attr!r} is not allowed"
    return None


def _check_format_fields(template: str, depth: int = 0) -> str | None:
    """Refuse format templates whose fields read refused attributes ("{0.sys.modules}")."""
    try:
        parsed = list(_FORMATTER.parse(template))
    except ValueError:  # not a valid template: str.format would raise too
        return None
    for _, field, spec, _ in parsed:
        if field:
            try:
                _, rest = _string.formatter_field_name_split(field)
                parts = list(rest)
            except ValueError:
                continue
            for is_attribute, name in parts:
                if is_attribute and (reason := _check_attribute_name(name)) is not None:
                    return f"format field {field!r}: {reason}"
        if spec and depth < 2 and (reason := _check_format_fields(spec, depth + 1)) is not None:
            return reason
    return None


def _words(text: str) -> list[str]:
    out, word = [], []
    for ch in text:
        if ch.isalnum() or ch == "_":
            word.append(ch)
        elif word:
            out.append("".join(word))
            word = []
    if word:
        out.append("".join(word))
    return out


def _is_super_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"
