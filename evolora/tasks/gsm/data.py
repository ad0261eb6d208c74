"""GSM8K files for the ``gsm`` task: held-out test items, and train problems turned into
reference examples whose programs are rebuilt from GSM8K's ``<<a*b=c>>`` annotations.

Source: GSM8K (Cobbe et al. 2021, arXiv 2110.14168); PopuLoRA (arXiv 2605.16727) §2 step 2.
"""

from __future__ import annotations

import ast
import gzip
import json
import operator
import re
from pathlib import Path

from evolora.tasks.base import HeldOutItem
from evolora.tasks.number_equality import numbers_equal
from evolora.tasks.numeric import marked_number

_CALCULATION = re.compile(r"<<([^=<>]+)=([^<>]+)>>")
_ARITHMETIC = re.compile(r"[\d\s+\-*/().]+")
MAX_EXAMPLE_CHARS = 250
"""GSM8K train questions longer than this are not used as examples (prompt tokens cost)."""
BUNDLED_TEST = Path(__file__).resolve().parents[2] / "data" / "gsm8k_test.jsonl.gz"
"""GSM8K's test split (1,319 problems, MIT license in ``evolora/data/GSM8K_LICENSE``), shipped
gzipped inside the package so held-out evaluation needs no path and no network."""
BUNDLED_TEST_ROWS = 1319


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(
            f"gsm task: GSM8K file {str(path)!r} does not exist; set the path to a GSM8K "
            f'jsonl (lines of {{"question", "answer"}}) or leave it unset'
        )
    rows = []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(
                    f"gsm task: {path}:{number} is not valid JSON ({exc}); expected one GSM8K record per line"
                ) from exc
            if not (
                isinstance(row, dict) and isinstance(row.get("question"), str) and isinstance(row.get("answer"), str)
            ):
                raise ValueError(
                    f"gsm task: {path}:{number} needs string fields 'question' and 'answer' (GSM8K format)"
                )
            rows.append(row)
    return rows


def _final_answer(answer: str) -> float | None:
    return marked_number(answer) if "####" in answer else None


def load_gsm8k(path: Path) -> list[HeldOutItem]:
    """GSM8K jsonl (plain, or gzipped when the name ends ".gz") → items; every answer must
    end with "#### <number>".

    Raises:
        FileNotFoundError: ``path`` is not a file.
        ValueError: a line is not JSON, lacks string "question"/"answer", or has no final answer.
    """
    items = []
    for number, row in enumerate(_read_jsonl(path), start=1):
        value = _final_answer(row["answer"])
        if value is None:
            raise ValueError(
                f"gsm task: record {number} of {path} has no '#### <number>' final answer; is this a GSM8K file?"
            )
        items.append(HeldOutItem(question=row["question"], answer=value))
    return items


def _program_from_calculations(answer: str) -> str | None:
    """Rebuild a program from GSM8K's <<expr=result>> annotations; None when unusable.

    Numbers equal to an earlier step's result become that step's variable, so the program
    computes step by step; the program's value must equal the "####" answer.

    >>> print(_program_from_calculations("<<16-3-4=9>>9 eggs, <<9*2=18>>18 dollars\\n#### 18"))
    step1 = 16-3-4
    step2 = step1*2
    print(step2)
    """
    final = _final_answer(answer)
    steps = _CALCULATION.findall(answer)
    if final is None or not steps or any(not _ARITHMETIC.fullmatch(e) for e, _ in steps):
        return None
    names: dict[str, str] = {}  # annotated result text -> step variable
    values: dict[str, float] = {}  # step variable -> value
    lines = []
    for i, (expr, result) in enumerate(steps, start=1):
        expr = re.sub(r"\d+(?:\.\d+)?", lambda m: names.get(m.group(0), m.group(0)), expr.strip().replace(" ", ""))
        value = _arithmetic_value(expr, values)
        if value is None:
            return None
        lines.append(f"step{i} = {expr}")
        names[result.strip()] = f"step{i}"
        values[f"step{i}"] = value
    if not numbers_equal(value, final):
        return None
    return "\n".join([*lines, f"print(step{len(steps)})"])


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _arithmetic_value(expr: str, variables: dict[str, float]) -> float | None:
    """Evaluate + - * / ( ) over numbers and known variables without ``eval``; None on error.

    >>> _arithmetic_value("step1*2+1", {"step1": 9.0}), _arithmetic_value("1/0", {})
    (19.0, None)
    """

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in variables:
            return variables[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"unsupported expression node {type(node).__name__}")

    try:
        return walk(ast.parse(expr, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None


def _load_train(path: Path) -> list[dict]:
    examples = []
    for row in _read_jsonl(path):
        program = _program_from_calculations(row["answer"])
        if program is not None and len(row["question"]) <= MAX_EXAMPLE_CHARS:
            examples.append({"problem": row["question"], "program": program})
    if not examples:
        raise ValueError(
            f"gsm task: no usable GSM8K problems in {path} (answers need "
            f"<<a*b=c>> annotations and a '#### <number>' line)"
        )
    return examples


def load_bundled_test() -> list[HeldOutItem]:
    """GSM8K's test split from the copy inside the package (:data:`BUNDLED_TEST`).

    Returns:
        1,319 items in the file's order; answers are the "#### N" numbers.

    Raises:
        FileNotFoundError: the package was installed without its data files (reinstall
            evolora; ``package-data`` ships ``evolora/data/*``).

    Source: GSM8K (Cobbe et al. 2021, arXiv 2110.14168), MIT license.
    """
    return load_gsm8k(BUNDLED_TEST)


def gsm_dev_set(task, size: int) -> list[HeldOutItem] | None:
    """``GSMTask.dev_set``: the validation-fitness dev set of the ``gsm`` task, the last ``size``
    problems of the GSM8K train file ``task.train_path`` (a slice of the training distribution;
    GSM8K's train and test splits share no problem), or None without ``train_path``: the package
    ships only the test split, and the dev set never takes test items.

    Raises:
        FileNotFoundError, ValueError: as :func:`load_gsm8k`.
    """
    if task.train_path is None:
        return None
    return load_gsm8k(Path(task.train_path))[-size:] if size > 0 else []
