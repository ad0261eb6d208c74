"""Values of the ``code`` task: literals, student answers, and the program harness.

Outputs and inputs are compared as Python values: text is read with
``ast.literal_eval`` (never ``eval``), and programs run only inside the sandbox, through
:func:`harness`, which prints ``repr`` of the list of results on its last line.

Source: Absolute Zero Reasoner (arXiv 2505.03335) §3 (value equality of outputs,
abduction checked by running f on the proposed input).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from evolora.parsing import FENCE, PARSE_ERRORS

_CALL_PREFIX = re.compile(r"^f\s*\(")
_OUTPUT_MARKER = re.compile(r"(?:^|\n)[\s>*#-]*(?:output|answer|result)\s*[*]*\s*:[*]*[ \t]*(.*)", re.IGNORECASE)
_INPUT_MARKER = re.compile(r"(?:^|\n)[\s>*#-]*(?:input|answer|arguments)\s*[*]*\s*:[*]*[ \t]*(.*)", re.IGNORECASE)
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_OUTPUT_VERB = re.compile(r"\b(?:is|be|returns?|gives|equals?|outputs?)\b\s*:?|==?", re.IGNORECASE)
_INPUT_VERB = re.compile(r"\b(?:is|be|inputs?|arguments?|use|try|call)\b\s*:?", re.IGNORECASE)
_BOUNDARY = re.compile(r"[,.;]?\s|[,.;]$")
_RELATION = re.compile(r"^\s*f\s*\(.*?\)\s*(?:==|=|->|=>|returns)\s*", re.IGNORECASE)
_KEPT_NODES = (
    ast.Import,
    ast.ImportFrom,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Assign,
    ast.AnnAssign,
)
MAX_LITERAL_CHARS = 10_000
"""Longer texts are never passed to ``ast.literal_eval`` (bounds its work)."""
_MAX_PHRASE_CHARS = 300


# ---------------------------------------------------------------------------- literals
def literal_value(text: str) -> Any:
    """The Python value of a literal (``"[1, 'a']"`` → ``[1, 'a']``).

    Raises:
        ValueError: not a literal, empty, longer than :data:`MAX_LITERAL_CHARS`, or too
            deeply nested for the parser.

    >>> literal_value("{'a': (1, 2.5)}"), literal_value(" -3 ")
    ({'a': (1, 2.5)}, -3)
    """
    text = text.strip()
    if not text or len(text) > MAX_LITERAL_CHARS:
        raise ValueError("empty or too long for a literal")
    try:
        return ast.literal_eval(text)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as exc:
        raise ValueError(f"not a Python literal: {exc}") from None


def parse_arguments(text: str) -> tuple | None:
    """Arguments of ``f`` written as literals → a tuple of values; None when they are not.

    Accepts ``f(...)`` around them, backticks and a trailing period.

    >>> parse_arguments("[1, 2], 3"), parse_arguments("f('a')"), parse_arguments("(1, 2)")
    (([1, 2], 3), ('a',), ((1, 2),))
    >>> parse_arguments("x + 1") is None, parse_arguments("") is None
    (True, True)
    """
    text = text.strip().strip("`").strip()
    if _CALL_PREFIX.match(text):
        for end in [i for i, ch in enumerate(text) if ch == ")"][:64]:
            inner = _tuple_of(text[text.index("(") + 1 : end])
            if inner is not None:
                return inner
        return None
    inner = _tuple_of(text)
    if inner is None and text.endswith("."):
        inner = _tuple_of(text[:-1])
    return inner


def _tuple_of(text: str) -> tuple | None:
    if not text.strip():
        return None
    try:
        value = literal_value(f"({text},)")
    except ValueError:
        return None
    return value if isinstance(value, tuple) else None


def arguments_text(arguments: tuple) -> str:
    """The canonical text of an argument tuple: the reprs joined by ", ".

    >>> arguments_text(([1, 2], 'a')), arguments_text(((1, 2),))
    ("[1, 2], 'a'", '(1, 2)')
    """
    return ", ".join(repr(a) for a in arguments)


def parse_output(text: str) -> tuple[bool, Any]:
    """A student's predicted output → (found, value); value is meaningful only when found.

    Looks, in order, at the text after each ``Output:``/``Answer:``/``Result:`` marker
    (the last first), each
    code fence (the last first) and each line (the last first); a leading ``f(...) ==``
    is dropped. The first candidate that is a literal wins.

    >>> parse_output("Output: [1, 2]"), parse_output("f(3) == 'ab'"), parse_output("no idea")
    ((True, [1, 2]), (True, 'ab'), (False, None))
    """
    for candidate in _answer_candidates(text, _OUTPUT_MARKER, _OUTPUT_VERB):
        candidate = _RELATION.sub("", candidate).strip().strip("`").strip()
        for option in (candidate, candidate[:-1] if candidate.endswith(".") else None):
            if option:
                try:
                    return True, literal_value(option)
                except ValueError:
                    pass
    return False, None


def parse_input(text: str) -> tuple | None:
    """A student's proposed input (arguments of f) → a tuple of values, or None.

    Same search order as :func:`parse_output` with ``Input:``/``Answer:``/``Arguments:``
    markers; ``f(...)`` around the arguments and a
    trailing ``== <output>`` are accepted.

    >>> parse_input("Input: [3, 1], 2"), parse_input("f('ab') == 'ba'"), parse_input("hmm")
    (([3, 1], 2), ('ab',), None)
    """
    for candidate in _answer_candidates(text, _INPUT_MARKER, _INPUT_VERB):
        arguments = parse_arguments(candidate)
        if arguments is None and "==" in candidate:
            arguments = parse_arguments(candidate.split("==")[0])
        if arguments is not None:
            return arguments
    return None


def _answer_candidates(text: str, marker: re.Pattern, verb: re.Pattern) -> list[str]:
    """Where an answer may be, most explicit first: marker lines, fences, inline code, the
    text after "is"/"returns"/"=" cut at each boundary (longest first), whole lines; the
    last occurrence of each kind comes first."""
    text = text[: MAX_LITERAL_CHARS * 4]
    markers = [m for m in reversed(marker.findall(text)) if m.strip()]
    fences = [f.strip() for f in reversed(FENCE.findall(text)) if f.strip()]
    spans = [s for s in reversed(_INLINE_CODE.findall(FENCE.sub(" ", text))) if s.strip()]
    phrases = []
    for match in reversed(list(verb.finditer(text))):
        rest = text[match.end() :].split("\n")[0][:_MAX_PHRASE_CHARS]
        cuts = [m.start() for m in _BOUNDARY.finditer(rest)] + [len(rest)]
        phrases += [rest[:cut] for cut in sorted(set(cuts), reverse=True) if rest[:cut].strip()]
    lines = [line for line in reversed(text.splitlines()) if line.strip()]
    return [*markers, *fences, *spans, *phrases, *lines]


def values_equal(a: Any, b: Any) -> bool:
    """Python equality of two literal values (``1 == 1.0``, ``{1, 2} == {2, 1}``); False on error."""
    try:
        return bool(a == b)
    except (RecursionError, TypeError, ValueError):
        return False


def defines_function(source: str, name: str = "f") -> bool:
    """True when ``source`` parses and defines ``name`` at top level (``def name(...)``).

    >>> defines_function("def f(x):\\n    return x"), defines_function("f = len"), defines_function("def (")
    (True, False, False)
    """
    try:
        tree = ast.parse(source)
    except PARSE_ERRORS:
        return False
    return any(isinstance(node, ast.FunctionDef) and node.name == name for node in tree.body)


def extract_program(text: str) -> str | None:
    """A student's program for induction: the last fence that defines ``f`` (else the
    first fence), or, without fences, the text from the first ``def f``; only its
    :func:`top_level_definitions` are kept. None when there is no code.

    >>> extract_program("Here:\\n```python\\ndef f(x):\\n    return x\\nprint(f(1))\\n```")
    'def f(x):\\n    return x'
    """
    fences = [f.strip("\n").rstrip() for f in FENCE.findall(text)]
    with_f = [f for f in fences if re.search(r"^def f\s*\(", f, re.MULTILINE)]
    code = with_f[-1] if with_f else fences[0] if fences else None
    if code is None:
        match = re.search(r"^def f\s*\(", text, re.MULTILINE)
        code = text[match.start() :].rstrip() if match else None
    return top_level_definitions(code) or None if code and code.strip() else None


def top_level_definitions(code: str) -> str:
    """The top-level imports, definitions and assignments of ``code``, without example
    calls, prints, asserts or ``__main__`` blocks; when it does not parse, the code up to
    the first unindented line that is not a definition or import (trailing prose) instead.

    >>> print(top_level_definitions("import math\\ndef f(x):\\n    return x\\nprint(f(2))\\nassert f(1) == 2"))
    import math
    <BLANKLINE>
    def f(x):
        return x
    >>> top_level_definitions("def f(x):\\n    return x\\nThis returns x.")
    'def f(x):\\n    return x'
    """
    try:
        tree = ast.parse(code)
    except PARSE_ERRORS:
        lines = code.splitlines()
        for i, line in enumerate(lines[1:], start=1):
            if (
                line.strip()
                and line[:1] not in (" ", "\t", "#", "@", ")", "]", "}")
                and not re.match(r"(?:def|class|import|from|async)\s", line)
            ):
                return "\n".join(lines[:i])
        return code
    lines = code.splitlines()
    kept = []
    for node in tree.body:
        if isinstance(node, _KEPT_NODES):
            first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
            kept.append("\n".join(lines[first - 1 : node.end_lineno]))
    return "\n\n".join(kept)


def harness(program: str, inputs: list[str] | tuple[str, ...]) -> str:
    """``program`` followed by one line that prints ``repr`` of the list of ``f(input)``.

    Inputs must be canonical argument texts (literals), so the added line holds no code of
    the model's. The caller reads the last output line with :func:`literal_value`.

    >>> print(harness("def f(x):\\n    return x * 2", ["3", "'a'"]))
    def f(x):
        return x * 2
    <BLANKLINE>
    print(repr([f(3), f('a')]))
    <BLANKLINE>
    """
    calls = ", ".join(f"f({i})" for i in inputs)
    return f"{program.rstrip()}\n\nprint(repr([{calls}]))\n"


def harness_values(output: str) -> list | None:
    """The list a :func:`harness` printed on its last non-empty line, or None."""
    lines = [line for line in output.splitlines() if line.strip()]
    if not lines:
        return None
    try:
        values = literal_value(lines[-1])
    except ValueError:
        return None
    return values if isinstance(values, list) else None
