"""Every ``model`` and ``tokenizer`` parameter of the library is typed with the aliases of
:mod:`evolora.hf_types` (``CausalLM``, ``Tokenizer``), so an IDE and a type checker see what travels."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALIASES = {"model": "CausalLM", "tokenizer": "Tokenizer"}


def untyped_parameters(source: str) -> list[str]:
    """``"function:line parameter"`` for each ``model``/``tokenizer`` parameter of ``source`` whose
    annotation is missing or does not name its alias (``CausalLM | None`` counts as typed)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            arguments = node.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                alias = ALIASES.get(arg.arg)
                if alias and (arg.annotation is None or alias not in ast.unparse(arg.annotation)):
                    found.append(f"{getattr(node, 'name', 'lambda')}:{node.lineno} {arg.arg}")
    return found


def test_the_scan_finds_untyped_and_wrongly_typed_parameters():
    source = (
        "def a(model, tokenizer: Tokenizer): ...\n"
        "def b(model: CausalLM | None = None, *, tokenizer: Any = None): ...\n"
        "def c(model: 'CausalLM', tokenizer: 'Tokenizer', models: list): ...\n"
        "f = lambda tokenizer: tokenizer\n"
    )
    assert untyped_parameters(source) == ["a:1 model", "b:2 tokenizer", "lambda:4 tokenizer"]


def test_every_model_and_tokenizer_parameter_is_typed_with_its_alias():
    untyped = []
    for path in sorted([*ROOT.glob("evolora/**/*.py"), *ROOT.glob("operators/**/*.py")]):
        untyped += [
            f"{path.relative_to(ROOT)} {where}" for where in untyped_parameters(path.read_text(encoding="utf-8"))
        ]
    assert not untyped, f"model/tokenizer parameters without CausalLM/Tokenizer (evolora.hf_types): {untyped}"
