"""The size budget and the import graph of the library (``evolora/`` and ``operators/``).

The budget counts statements, not physical lines, so formatting cannot break it: no file over
300 statements and no function over 50 (its docstring excluded), each a sign to split by concern;
branching is capped apart by ruff's C901 (``[tool.ruff.lint.mccabe]``, tests/test_lint.py). The
imports have no cycle at any depth: a module's imports inside functions (how it defers a heavy or
optional dependency) count as edges too, so a deferred import cannot hide a cycle. The same holds
one level up: grouped by package (the first two dotted components: ``evolora.bank.local`` is in
``evolora.bank``), the imports form a DAG, so no package imports one that imports it back."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FILE_STATEMENTS = 300
MAX_FUNCTION_STATEMENTS = 50


def _modules() -> dict[str, Path]:
    """{dotted module name: path} for the installed layout (``operators/`` is ``evolora.operators``)."""
    found = {}
    for base, package in ((ROOT / "evolora", "evolora"), (ROOT / "operators", "evolora.operators")):
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _statements(nodes: list[ast.stmt]) -> int:
    """Statements in ``nodes`` and everything nested in them (a compound statement counts once, and
    each statement of its body again)."""
    return sum(isinstance(node, ast.stmt) for top in nodes for node in ast.walk(top))


def _body(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    """A function's body without its docstring."""
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return node.body[1:]
    return node.body


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Library modules that ``name`` imports anywhere: at the top level, in functions and in methods."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            for alias in node.names:
                child = f"{base}.{alias.name}"
                targets.add(child if child in modules else base)
    return {t for t in targets if t in modules and t != name}


def test_no_library_file_is_over_the_statement_budget():
    over = {}
    for path in _modules().values():
        if (n := _statements(ast.parse(path.read_text(encoding="utf-8")).body)) > MAX_FILE_STATEMENTS:
            over[str(path.relative_to(ROOT))] = n
    assert not over, f"files over {MAX_FILE_STATEMENTS} statements: {over}; split them by job"


def test_no_function_is_over_the_statement_budget():
    over = {}
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and _statements(_body(node)) > MAX_FUNCTION_STATEMENTS
            ):
                over[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = _statements(_body(node))
    assert not over, f"functions over {MAX_FUNCTION_STATEMENTS} statements: {over}; split them by concern"


def test_the_budget_counts_statements_not_lines():
    wide = ast.parse('def f(x):\n    """Doc."""\n    if x:\n        return 1\n    return 2\n').body[0]
    tall = ast.parse(
        "def f(x):\n    if (\n        x\n    ):\n        return (\n            1\n        )\n    return 2\n"
    ).body[0]
    assert _statements(_body(wide)) == _statements(_body(tall)) == 3


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that starts and ends at the same node, or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = 1
        for target in sorted(graph.get(name, ())):
            if state.get(target) == 1:
                trail = path + [name]
                return trail[trail.index(target) :] + [target]
            if target not in state and (cycle := visit(target, path + [name])):
                return cycle
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (cycle := visit(name, [])):
            return cycle
    return None


def test_imports_at_any_depth_have_no_cycle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    cycle = _find_cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def _package(name: str) -> str:
    """The package-level node of a module: its first two dotted components (``evolora.bank.local``
    → ``evolora.bank``; a top-level module such as ``evolora.fitness`` is its own node)."""
    return ".".join(name.split(".")[:2])


def _package_edges(modules: dict[str, Path]) -> dict[tuple[str, str], set[tuple[str, str]]]:
    """{(package, imported package): the (module, imported module) edges that make it}, over imports at any depth."""
    edges: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for name, path in modules.items():
        for target in _imports(name, path, modules):
            if _package(name) != _package(target):
                edges.setdefault((_package(name), _package(target)), set()).add((name, target))
    return edges


def test_packages_import_each_other_without_a_cycle():
    """0 upward imports: an import that closes a cycle among packages is one (move the shared piece
    down to the package its users share, or the orchestration up); a protocol imported under
    ``TYPE_CHECKING`` only counts too."""
    edges = _package_edges(_modules())
    graph: dict[str, set[str]] = {}
    for source, target in edges:
        graph.setdefault(source, set()).add(target)
    cycle = _find_cycle(graph)
    assert cycle is None, f"package cycle: {' -> '.join(cycle)}; made by the module imports\n" + "\n".join(
        f"  {a} -> {b}: " + ", ".join(f"{m} -> {t}" for m, t in sorted(edges[a, b])) for a, b in zip(cycle, cycle[1:])
    )


def test_the_cycle_finder_finds_cycles():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "d": {"a", "c"}}) is None


def test_the_checks_see_the_library():
    modules = _modules()
    assert {"evolora.run", "evolora.run.run", "evolora.tasks.gsm.task", "evolora.operators.crossover"} <= set(modules)
    graph_of_run = _imports("evolora.run.run", modules["evolora.run.run"], modules)
    assert "evolora.league" in graph_of_run and "evolora.tasks" in graph_of_run
    assert "evolora.model" in graph_of_run  # imported inside Run.__init__ only: deferred imports are seen
    assert _package("evolora.bank.local") == "evolora.bank" and _package("evolora.fitness") == "evolora.fitness"
    edges = _package_edges(modules)
    assert ("evolora.bank.local", "evolora.learner") in edges["evolora.bank", "evolora.learner"]
    assert ("evolora.fitness", "evolora.exam") in edges["evolora.fitness", "evolora.exam"]
    assert ("evolora.bank", "evolora.bank") not in edges  # a package's imports of itself are no edge


def test_tests_import_shared_helpers_one_way():
    """Shared test code is imported as a bare ``*_helpers`` module of ``tests/``: never through
    ``tests.``, from ``conftest`` or from another test module."""
    stray = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else ([alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            )
            stray += [
                f"{path.name}: {name}"
                for name in names
                if name.startswith(("tests.", "test_", "conftest")) or name == "tests"
            ]
    assert not stray, f"import shared test code from a *_helpers module instead: {stray}"


def test_no_re_export_shims():
    shims = [str(p.relative_to(ROOT)) for p in _modules().values() if "noqa: F401" in p.read_text(encoding="utf-8")]
    assert not shims, f"import names from the module that defines them, not through {shims}"
