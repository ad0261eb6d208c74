"""Arms-race metrics of self-play: proposal complexity, coverage, entropy, matchups, lengths.

Pure functions on text, numbers and game records; no model, no I/O (torch is imported
lazily, only by :func:`token_entropy`). Every function that reads source text returns
None (or skips the item) when it does not parse, so a step's malformed proposals never
break logging.

Programs (``code``/``gsm`` proposals)::

    ast_depth, cyclomatic_complexity, lines_of_code, variable_count, program_metrics

Arithmetic expressions (``arith`` proposals)::

    expression_depth, operator_count, max_digits, expression_metrics

Across proposals and games::

    signature, coverage, proposal_complexity, matchup_matrix,
    token_entropy, mean_token_entropy, response_length_stats

Source: PopuLoRA (arXiv 2605.16727) §4 (complexity, coverage, entropy, response length,
per-matchup solve rates).
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from statistics import median
from typing import Any, Literal

from evolora.parsing import PARSE_ERRORS
from evolora.tasks.expression_size import expression_depth, expression_tree, max_digits, operator_count

# ---------------------------------------------------------------------------- programs
_CONTEXTS = (ast.Load, ast.Store, ast.Del)
_BRANCHES = (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.ExceptHandler, ast.Assert)


def _parse(source: str | ast.AST, mode: str = "exec") -> ast.AST:
    return source if isinstance(source, ast.AST) else ast.parse(source, mode=mode)


def _children(node: ast.AST) -> list[ast.AST]:
    return [
        c
        for c in ast.iter_child_nodes(node)
        if not isinstance(c, (*_CONTEXTS, ast.operator, ast.unaryop, ast.boolop, ast.cmpop))
    ]


def _depth(root: ast.AST) -> int:
    """Edges on the longest path from ``root`` (iterative: no recursion limit)."""
    deepest, stack = 0, [(root, 0)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in _children(node))
    return deepest


def ast_depth(source: str | ast.AST) -> int:
    """Depth of a program's syntax tree: nodes on the longest path below the module root.

    Context markers (Load/Store) and operator tokens (``+``, ``and``, ``<``) are not nodes.

    >>> ast_depth(""), ast_depth("x = 1"), ast_depth("print(x)"), ast_depth("if a:\\n    y = b + 1")
    (0, 2, 3, 4)

    Raises:
        SyntaxError: ``source`` is not valid Python.
    """
    return _depth(_parse(source))


def cyclomatic_complexity(source: str | ast.AST) -> int:
    """McCabe's cyclomatic complexity: 1 + the number of branch points.

    Branch points: ``if``/``elif``, conditional expressions, ``for``/``while`` loops,
    ``except`` handlers, ``assert``, each ``for`` and ``if`` clause of a comprehension,
    each extra operand of ``and``/``or``, each ``case`` of a ``match``. The whole module
    is counted as one graph (functions add their branches, not a new entry point).

    >>> cyclomatic_complexity("x = 1"), cyclomatic_complexity("if a and b:\\n    x = 1\\nelif c:\\n    x = 2")
    (1, 4)

    Raises:
        SyntaxError: ``source`` is not valid Python.
    """
    count = 1
    for node in ast.walk(_parse(source)):
        if isinstance(node, _BRANCHES):
            count += 1
        elif isinstance(node, ast.comprehension):
            count += 1 + len(node.ifs)
        elif isinstance(node, ast.BoolOp):
            count += len(node.values) - 1
        elif type(node).__name__ == "match_case":
            count += 1
    return count


def lines_of_code(source: str) -> int:
    """Lines that are neither blank nor only a ``#`` comment.

    >>> lines_of_code("# setup\\nx = 1\\n\\n   # note\\nprint(x)  # show\\n")
    2
    """
    return sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))


def variable_count(source: str | ast.AST) -> int:
    """Distinct names a program binds: assignment targets of any kind (``=``, ``+=``,
    ``for``, ``with … as``, ``:=``, comprehension targets, ``except … as``) and function
    or lambda parameters. Function, class and imported names are not counted.

    >>> variable_count("a = 1\\nb, c = 2, 3\\na += b\\nfor i in range(3):\\n    pass")
    4
    >>> variable_count("def f(x, *args, k=1, **kw):\\n    return x")
    4

    Raises:
        SyntaxError: ``source`` is not valid Python.
    """
    names: set[str] = set()
    for node in ast.walk(_parse(source)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return len(names)


def program_metrics(source: str) -> dict[str, int] | None:
    """All program metrics at once; None when ``source`` is not valid Python.

    >>> program_metrics("x = 1\\nif x:\\n    print(x)")
    {'ast_depth': 4, 'cyclomatic': 2, 'lines': 3, 'variables': 1}
    >>> program_metrics("def (") is None
    True
    """
    try:
        tree = ast.parse(source)
    except PARSE_ERRORS:
        return None
    return {
        "ast_depth": ast_depth(tree),
        "cyclomatic": cyclomatic_complexity(tree),
        "lines": lines_of_code(source),
        "variables": variable_count(tree),
    }


# ---------------------------------------------------------------------------- expressions
def expression_metrics(text: str) -> dict[str, int] | None:
    """Depth, operator count and max digits of an expression; None when it does not parse.

    >>> expression_metrics("(3 + 4) * 12")
    {'depth': 2, 'operators': 2, 'digits': 2}
    >>> expression_metrics("3 +") is None
    True
    """
    try:
        tree = expression_tree(text)
    except PARSE_ERRORS:
        return None
    return {"depth": expression_depth(tree), "operators": operator_count(tree), "digits": max_digits(text)}


# ---------------------------------------------------------------------------- coverage
_NUMBER = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")
_SPACE_AROUND_SYMBOL = re.compile(r"\s*([-+*/%^=()])\s*")


def signature(problem_text: str) -> str:
    """A problem's shape for coverage: lowercased, every number replaced by ``#``,
    whitespace collapsed to single spaces and dropped around ``+ - * / % ^ = ( )``.

    Two problems with the same signature differ only in their numbers (and spacing).

    >>> signature("(3 + 4) * 12"), signature("(10+2)*  7")
    ('(#+#)*#', '(#+#)*#')
    >>> signature("Tom has 1,200 apples.\\n He eats 3.5 of them.")
    'tom has # apples. he eats # of them.'
    """
    text = _NUMBER.sub("#", problem_text.lower())
    text = " ".join(text.split())
    return _SPACE_AROUND_SYMBOL.sub(r"\1", text).strip()


def coverage(signatures: Iterable[str | None]) -> int:
    """Number of distinct signatures (None entries are ignored).

    >>> coverage(["#+#", "#*#", "#+#", None])
    2
    """
    return len({s for s in signatures if s is not None})


# ---------------------------------------------------------------------------- games
def _field(record: Any, name: str) -> Any:
    return record[name] if isinstance(record, Mapping) else getattr(record, name)


def proposal_complexity(games: Iterable[Any], kind: Literal["expression", "program"]) -> dict[str, float | int]:
    """Mean complexity of the *valid* proposals among ``games``.

    Args:
        games: records with fields ``valid``, ``problem`` and ``program`` (GameRecord
            objects or their dicts from ``matches.jsonl``).
        kind: "expression" measures ``problem`` with :func:`expression_metrics` (arith);
            "program" measures ``program`` with :func:`program_metrics` (gsm, code).

    Returns:
        {"count": valid proposals measured, metric name: mean, ...}; only "count" (0)
        when none was measured.

    >>> proposal_complexity([{"valid": True, "problem": "1 + 2", "program": ""},
    ...                      {"valid": True, "problem": "(1 + 2) * 30", "program": ""},
    ...                      {"valid": False, "problem": "x", "program": ""}], "expression")
    {'count': 2, 'depth': 1.5, 'operators': 1.5, 'digits': 1.5}
    """
    if kind not in ("expression", "program"):
        raise ValueError(f"proposal_complexity: kind must be 'expression' or 'program', got {kind!r}")
    rows = []
    for game in games:
        if not _field(game, "valid"):
            continue
        text = _field(game, "problem" if kind == "expression" else "program")
        metrics = (expression_metrics if kind == "expression" else program_metrics)(text or "")
        if metrics is not None:
            rows.append(metrics)
    out: dict[str, float | int] = {"count": len(rows)}
    for name in rows[0] if rows else ():
        out[name] = sum(row[name] for row in rows) / len(rows)
    return out


def matchup_matrix(games: Iterable[Any]) -> dict[str, dict[str, float | None]]:
    """Solve rate of every (teacher, student) pair that met: correct / graded attempts.

    Args:
        games: records with fields ``teacher``, ``student`` and ``grades`` (a list of
            "correct"/"wrong"/"format"), as objects or dicts.

    Returns:
        ``{teacher: {student: solve_rate}}``; the rate is None when the pair met but no
        attempt was graded (every proposal invalid). Pairs that never met are absent.

    >>> matchup_matrix([{"teacher": "t0", "student": "s0", "grades": ["correct", "wrong"]},
    ...                 {"teacher": "t0", "student": "s0", "grades": ["correct", "format"]},
    ...                 {"teacher": "t1", "student": "s0", "grades": []}])
    {'t0': {'s0': 0.5}, 't1': {'s0': None}}
    """
    counts: dict[str, dict[str, list[int]]] = {}
    for game in games:
        cell = counts.setdefault(_field(game, "teacher"), {}).setdefault(_field(game, "student"), [0, 0])
        grades = _field(game, "grades")
        cell[0] += sum(label == "correct" for label in grades)
        cell[1] += len(grades)
    return {t: {s: (c / n if n else None) for s, (c, n) in row.items()} for t, row in counts.items()}


# ---------------------------------------------------------------------------- samples
def token_entropy(logits):
    """Entropy (nats) of each next-token distribution.

    Accepts logits or log-probabilities (``log_softmax`` is idempotent on the latter);
    ``-inf`` entries (masked tokens) contribute 0.

    Shapes:
        logits: (..., V) → returns (...), float32.

    >>> import torch
    >>> [round(h, 4) for h in token_entropy(torch.zeros(2, 4)).tolist()]  # log 4 each
    [1.3863, 1.3863]
    """
    import torch

    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    return -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(-1)  # 0 log 0 = 0


def mean_token_entropy(entropies, mask=None) -> float | None:
    """Mean of per-token entropies over the tokens that count.

    Args:
        entropies: a (B, T) tensor of per-token entropies (from :func:`token_entropy`),
            or a list of per-sequence lists of floats (ragged allowed).
        mask: for a tensor, a (B, T) bool tensor marking real tokens (padding False);
            None counts every entry.

    Returns:
        The token-weighted mean, or None when there is no token.

    >>> mean_token_entropy([[1.0, 2.0], [3.0]])
    2.0
    >>> import torch
    >>> mean_token_entropy(torch.tensor([[1.0, 5.0], [3.0, 0.0]]), torch.tensor([[True, False], [True, False]]))
    2.0
    """
    if hasattr(entropies, "dim"):  # a tensor
        values = entropies if mask is None else entropies[mask]
        return float(values.float().mean()) if values.numel() else None
    flat = [float(x) for row in entropies for x in row]
    return sum(flat) / len(flat) if flat else None


def response_length_stats(lengths: Iterable[int]) -> dict[str, float | int | None]:
    """Count, mean, median, min and max of response lengths (tokens or characters).

    >>> response_length_stats([4, 1, 10])
    {'count': 3, 'mean': 5.0, 'median': 4, 'min': 1, 'max': 10}
    >>> response_length_stats([])
    {'count': 0, 'mean': None, 'median': None, 'min': None, 'max': None}
    """
    values: Sequence[int] = list(lengths)
    if not values:
        return {"count": 0, "mean": None, "median": None, "min": None, "max": None}
    return {
        "count": len(values),
        "mean": sum(values) / len(values),
        "median": median(values),
        "min": min(values),
        "max": max(values),
    }


def finite_mean(values: Iterable[float | None]) -> float | None:
    """Mean of the finite numbers in ``values``; None when there is none.

    >>> finite_mean([1.0, None, float("nan"), 3.0]), finite_mean([None])
    (2.0, None)
    """
    kept = [v for v in values if v is not None and math.isfinite(v)]
    return sum(kept) / len(kept) if kept else None


__all__ = [
    "ast_depth",
    "coverage",
    "cyclomatic_complexity",
    "expression_depth",
    "expression_metrics",
    "finite_mean",
    "lines_of_code",
    "matchup_matrix",
    "max_digits",
    "mean_token_entropy",
    "operator_count",
    "program_metrics",
    "proposal_complexity",
    "response_length_stats",
    "signature",
    "token_entropy",
    "variable_count",
]
