"""Bounded, strict YAML for configs and ``--set`` values.

:func:`load_yaml` reads YAML like ``yaml.safe_load`` but refuses, with one short line, what a
config never needs and what could stall or flood the command line:

* documents of more than :data:`MAX_CHARS` characters;
* alias expansion past :data:`MAX_NODES` nodes (a "billion laughs" alias bomb) or past
  :data:`MAX_ALIASES` aliases, and recursive aliases: counted on the composed node graph, before
  any Python object is built;
* nesting deeper than :data:`MAX_DEPTH` (the parser recurses once per level);
* integers and floats of more than :data:`MAX_NUMBER_CHARS` characters (Python refuses ints of
  4,300 digits with a traceback; no config value needs 40);
* the same key twice in one mapping (which value wins is invisible to the user): the message
  names the key and both lines;
* strings of more than :data:`MAX_STRING_CHARS` characters;
* control characters (NUL included) in strings, e.g. from ``"\\0"`` escapes or a ``--set`` value.

Every message quotes values through :func:`short`: one line of at most :data:`SHORT` characters.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_NODES = 5_000
"""Nodes a document may hold with every alias expanded (the shipped configs hold under 300)."""
MAX_CHARS = 1 << 20
"""Characters of a document (the shipped configs hold under 8,000)."""
MAX_DEPTH = 32
"""Nesting of sequences and mappings (the shipped configs nest 4 deep)."""
MAX_ALIASES = 100
"""Aliases (``*name``) a document may use."""
MAX_NUMBER_CHARS = 40
"""Characters of an integer or float scalar (sign, digits, point and exponent)."""
MAX_STRING_CHARS = 4096
"""Characters of a string (a path's limit on Linux; no key or value of a config needs more)."""
SHORT = 80
"""Characters of a value quoted in a message."""
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # tab, newline and carriage return are text


class StrictYAMLError(ValueError):
    """A YAML document refused by :func:`load_yaml`; the message is one line."""


def short(value: Any, limit: int = SHORT) -> str:
    """``repr(value)`` (strings: their repr too) on one line, cut to ``limit`` characters with ``...``.

    >>> short("x" * 200, 12)
    "'xxxxxxxx..."
    """
    return clip(repr(value), limit)


def clip(text: str, limit: int = SHORT) -> str:
    """``text`` on one line (every run of white space one space), cut to ``limit`` characters with ``...``.

    >>> clip("a  b\\nc", 80), clip("x" * 200, 12)
    ('a b c', 'xxxxxxxxx...')
    """
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _line(node: Node) -> int:
    return node.start_mark.line + 1


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with the bounds of this module (budget checked before construction)."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self.alias_count = self.node_count = self.depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.alias_count += 1
            if self.alias_count > MAX_ALIASES:
                event = self.peek_event()
                raise StrictYAMLError(
                    f"line {event.start_mark.line + 1}: more than {MAX_ALIASES} aliases (*name); write the values out"
                )
        self.depth += 1
        self.node_count += 1
        try:
            if self.node_count > MAX_NODES:
                raise StrictYAMLError(
                    f"line {self.peek_event().start_mark.line + 1}: the document holds more than "
                    f"{MAX_NODES:,} values; a config needs a few hundred"
                )
            if self.depth > MAX_DEPTH:
                raise StrictYAMLError(
                    f"line {self.peek_event().start_mark.line + 1}: values nest more than "
                    f"{MAX_DEPTH} levels deep; a config needs a few"
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_document(self, node):
        _check_size(node)
        return super().construct_document(node)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, MappingNode):
            seen: dict[Any, Any] = {}  # key -> the mark of its first occurrence
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # ``<<: *defaults`` then an explicit key: YAML's documented override
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: SafeLoader refuses it with its own message
                    continue
                if first is not None:
                    both = (
                        f"line {first.line + 1}, columns {first.column + 1} and {key_node.start_mark.column + 1}"
                        if first.line == key_node.start_mark.line
                        else f"lines {first.line + 1} and {_line(key_node)}"
                    )
                    raise StrictYAMLError(
                        f"line {_line(key_node)}: key {short(key)} appears twice in one mapping ({both}); keep one"
                    )
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        _check_number(node, "integer")
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node):
        _check_number(node, "number")
        return super().construct_yaml_float(node)

    def construct_yaml_str(self, node):
        value = super().construct_yaml_str(node)
        check_text(value, f"line {_line(node)}")
        return value


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)
StrictLoader.add_constructor("tag:yaml.org,2002:str", StrictLoader.construct_yaml_str)


def _check_number(node: ScalarNode, kind: str) -> None:
    text = node.value.replace("_", "")
    if len(text) > MAX_NUMBER_CHARS:
        raise StrictYAMLError(
            f"line {_line(node)}: the {kind} {short(node.value, 24)} has {len(text)} characters "
            f"(at most {MAX_NUMBER_CHARS}); give a shorter value"
        )


def check_text(value: str, where: str, *, limit: int = MAX_STRING_CHARS) -> None:
    """Refuse a string longer than ``limit`` characters or holding a control character (NUL
    included; tab, newline and CR are allowed).

    Raises:
        StrictYAMLError: one line naming ``where``, the character's code and the value (shortened).
    """
    if len(value) > limit:
        raise StrictYAMLError(
            f"{where}: the string {short(value, 40)} has {len(value):,} characters "
            f"(at most {limit}); give a shorter value"
        )
    found = _CONTROL.search(value)
    if found:
        raise StrictYAMLError(
            f"{where}: the string {short(value, 40)} holds the control character U+{ord(found.group()):04X}; remove it"
        )


def _check_size(root: Node) -> None:
    """Refuse a node graph that holds a cycle or more than :data:`MAX_NODES` nodes once every alias
    is expanded (sizes are memoised per node, so the check is linear in the graph, not its expansion)."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = (
            [n for pair in node.value for n in pair]
            if isinstance(node, MappingNode)
            else list(node.value)
            if isinstance(node, SequenceNode)
            else []
        )
        if done:
            open_.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            if sizes[key] > MAX_NODES:
                raise StrictYAMLError(
                    f"line {_line(node)}: the document holds more than {MAX_NODES:,} values, aliases expanded; "
                    "a config needs a few hundred"
                )
            continue
        if key in sizes:
            continue
        if key in open_:
            raise StrictYAMLError(
                f"line {_line(node)}: an alias refers to a value that contains it; write the value out"
            )
        open_.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in open_:
                raise StrictYAMLError(
                    f"line {_line(child)}: an alias refers to a value that contains it; write the value out"
                )
            if id(child) not in sizes:
                stack.append((child, False))


def load_yaml(text: str) -> Any:
    """Parse one YAML document within the bounds of this module.

    Raises:
        StrictYAMLError: a bound is exceeded (one line).
        yaml.YAMLError: malformed YAML (format it with :func:`yaml_error_line`).
    """
    if len(text) > MAX_CHARS:
        raise StrictYAMLError(
            f"the document has {len(text):,} characters (at most {MAX_CHARS:,}); a config needs a few thousand"
        )
    loader = StrictLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def yaml_error_line(error: yaml.YAMLError) -> str:
    """One line for a PyYAML error: the problem and where (``line L, column C``), no snippet."""
    problem = getattr(error, "problem", None) or getattr(error, "context", None)
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    if not problem:
        return short(str(error).splitlines()[0] if str(error) else type(error).__name__, 120)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + " ".join(str(problem).split())[:120]
