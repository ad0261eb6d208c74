"""Every Python example of the README and the tutorials runs as written, on the tiny random model.

Each page runs top to bottom in a fresh temporary directory holding a copy of ``tasks/``, its
untitled ``python`` blocks in order in one namespace, as a reader pasting them into one interpreter
would. A block with a title (```` ```python title="my_ops.py" ````, or a titled ``yaml`` block) is a
file: it is written into the directory first, which is on ``sys.path`` (as a script's own folder
is). A block that needs a real cluster or a GPU says so in the comment right above it,
``<!-- skip-test: why -->``; it is compiled but not run. A block followed by an ``output`` block
must print exactly that (what the reader will see). Page-specific checks then look at the values
the page computed, so an example that runs but does nothing fails too.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
import yaml

from evolora.operators import REGISTRY

pytestmark = pytest.mark.slow  # over ~5 s each: CI runs them, `-m "not slow"` skips them

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "tutorials").glob("*.md"))]
FENCE = re.compile(
    r"(?:^<!-- skip-test: (?P<skip>[^\n]*?) -->\n)?^```(?P<language>\w+)(?P<attrs>[^\n]*)\n"
    r"(?P<code>.*?)^```[ \t]*$",
    re.M | re.S,
)

torch.set_num_threads(1)


class Block(NamedTuple):
    language: str
    title: str | None
    code: str
    skip: str | None


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of ``page`` in order, with their title and skip reason."""
    found = []
    for match in FENCE.finditer(page.read_text()):
        title = re.search(r'title="([^"]+)"', match["attrs"])
        found.append(Block(match["language"], title and title[1], match["code"], match["skip"]))
    return found


@pytest.fixture
def clean_registry(tmp_path):
    """Undo the examples' registrations and imports, so the registry is as before (names are global)."""
    saved = {kind: dict(specs) for kind, specs in REGISTRY._specs.items()}
    modules = set(sys.modules)
    yield
    for kind, specs in saved.items():
        REGISTRY._specs[kind] = specs
    for name in set(sys.modules) - modules:
        if Path(getattr(sys.modules[name], "__file__", None) or "/").is_relative_to(tmp_path):
            del sys.modules[name]


def run_page(page: Path, directory: Path, monkeypatch) -> dict:
    """Write the page's files into ``directory``, run its Python blocks there; return the namespace."""
    shutil.copytree(ROOT / "tasks", directory / "tasks")
    monkeypatch.chdir(directory)
    monkeypatch.syspath_prepend(str(directory))
    page_blocks = blocks(page)
    for block in page_blocks:
        if block.title:
            (directory / block.title).write_text(block.code)
    namespace: dict = {"__name__": "__docs__"}
    runnable = [
        (block, after)
        for block, after in zip(page_blocks, [*page_blocks[1:], None])
        if block.language == "python" and not block.title
    ]
    for index, (block, after) in enumerate(runnable):
        code = compile(block.code, f"{page.name}[python {index}]", "exec")
        if block.skip is None:
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                exec(code, namespace)
            if after is not None and after.language == "output":  # what the page says it prints
                assert printed.getvalue() == after.code, f"{page.name}[python {index}] printed:\n{printed.getvalue()}"
    return namespace


def _check_readme(namespace: dict, directory: Path) -> None:
    summary = namespace["summary"]
    assert summary["steps"] == 2 and summary["held_out"]["base"]["total"] == 4
    assert (directory / "runs" / "readme-demo" / "final" / "summary.json").exists()


def _check_custom_operator(namespace: dict, directory: Path) -> None:
    selection, params = namespace["run"].operators.selection
    assert selection.name == "my_ops:epsilon_greedy" and params == {"epsilon": 0.25}
    assert selection.params["epsilon"].high == 1  # the bounds declared by @register in my_ops.py
    births = namespace["births"]  # one child per role at steps 2 and 4 (not at the last step)
    assert [birth["step"] for birth in births] == [2, 2]
    assert "epsilon" in namespace["refused"] and "1.5" in namespace["refused"]


def _check_strategies(namespace: dict, directory: Path) -> None:
    births = namespace["births"]  # the own outer loop ran at steps 2 and 4, one child per role each time
    assert [birth.step for birth in births] == [2, 2, 4, 4] and namespace["summary"]["steps"] == 4
    assert {birth.operator for birth in births} <= {"svd_merge", "lowrank_gaussian"}
    born = {entry["id"] for entry in namespace["run"].lineage if entry["step"] > 0}
    assert born == {birth.child for birth in births}


def _check_deap_evotorch(namespace: dict, directory: Path) -> None:
    for saved in ("runs/deap/best", "runs/snes/best"):
        assert (directory / saved / "adapter_config.json").exists(), saved


def _check_ray(namespace: dict, directory: Path) -> None:
    assert namespace["summary"]["steps"] == 2
    assert namespace["workers"] == 2


CHECKS = {
    "README.md": _check_readme,
    "custom-operator.md": _check_custom_operator,
    "strategies.md": _check_strategies,
    "deap-evotorch.md": _check_deap_evotorch,
    "ray.md": _check_ray,
}
"""Page name -> a check of the values its examples computed."""


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_page_examples_run(page, tmp_path, monkeypatch, clean_registry):
    code = "".join(block.code for block in blocks(page))
    if "evotorch" in code:
        pytest.importorskip("evotorch", reason="optional extra: pip install 'evolora[evotorch]'")
    if "import ray" in code:
        pytest.importorskip("ray", reason="optional extra: pip install 'evolora[ray]'")
    namespace = run_page(page, tmp_path, monkeypatch)
    if page.name in CHECKS:
        CHECKS[page.name](namespace, tmp_path)


def test_the_custom_operator_runs_from_the_command_line(tmp_path):
    """The page's command lines as written (generations shortened): ``evolora operators --import my_ops``
    lists the operator, ``PYTHONPATH=. evolora evolve my_run.yaml`` and the preset line run it; without
    the path, exit 2 and the hint."""
    page = ROOT / "docs" / "tutorials" / "custom-operator.md"
    for block in blocks(page):
        if block.title:
            (tmp_path / block.title).write_text(block.code)
    commands = "".join(block.code for block in blocks(page) if block.language == "bash")
    lines = [line.split("#")[0].strip() for line in commands.splitlines() if line.strip()]
    assert len(lines) == 3
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": bin_dir + os.pathsep + os.environ["PATH"]}
    env.pop("PYTHONPATH", None)
    short = " --set selfplay.roles.teacher.max_new_tokens=8 --set selfplay.roles.student.max_new_tokens=8 --set eval.limit=2"

    def sh(line: str) -> subprocess.CompletedProcess:
        return subprocess.run(line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    listed = sh(lines[0])
    assert listed.returncode == 0 and "epsilon_greedy" in listed.stdout and "[0, 1]" in listed.stdout, listed.stdout
    refused = sh(lines[1].removeprefix("PYTHONPATH=. ") + short)
    assert refused.returncode == 2 and "PYTHONPATH=." in refused.stdout + refused.stderr
    for line, out in ((lines[1], "runs/my-run"), (lines[2], "runs/arith")):
        done = sh(line + short + " --set run.steps=2")
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        config = (tmp_path / out / "config.yaml").read_text()
        assert "name: my_ops:epsilon_greedy" in config and "name: tiny-random" in config


def test_every_page_with_a_check_has_examples():
    names = {page.name for page in PAGES}
    assert set(CHECKS) <= names, set(CHECKS) - names
    assert all(any(b.language == "python" for b in blocks(page)) for page in PAGES if page.name in CHECKS)


def test_skipped_blocks_say_why_and_compile():
    for page in PAGES:
        for block in blocks(page):
            if block.skip is not None:
                assert len(block.skip.split()) >= 3, f"{page.name}: say why the block is not run"
                compile(block.code, page.name, "exec")


def test_the_tutorials_have_deap_and_evotorch_examples():
    code = [block.code for page in PAGES for block in blocks(page) if block.language == "python"]
    assert any("algorithms.eaSimple" in block for block in code)
    assert any("SNES" in block for block in code)


def test_yaml_examples_parse():
    for page in PAGES:
        for block in blocks(page):
            if block.language == "yaml":
                assert isinstance(yaml.safe_load(block.code), dict), page.name


OUTPUT_PAGES = [ROOT / "docs" / "getting-started.md", ROOT / "docs" / "tutorials" / "custom-operator.md"]
"""Pages whose command lines are followed by what they print (an ``output`` block)."""


def shown_commands(page: Path) -> list[tuple[list[str], str]]:
    """(the evolora arguments, the ``output`` block after it) of each one-line ``bash`` block of
    ``page`` that an ``output`` block follows; ``PYTHONPATH=.`` and the program's path dropped."""
    page_blocks = blocks(page)
    shown = []
    for block, after in zip(page_blocks, page_blocks[1:]):
        if block.language == "bash" and after.language == "output":
            words = shlex.split(block.code.split("#")[0])
            program = next(i for i, word in enumerate(words) if word.endswith("evolora"))
            shown.append((words[program + 1 :], after.code))
    return shown


def _settings(args: list[str]) -> tuple[str, list[str], str]:
    """(config, --set values, --out) of ``evolora evolve`` arguments."""
    sets = [args[i + 1] for i, arg in enumerate(args) if arg == "--set"]
    return args[1], sets, args[args.index("--out") + 1]


def _lines(text: str) -> list[str]:
    """``text``'s lines without trailing blanks and without the progress bar's line (its time varies)."""
    return [line.rstrip() for line in text.splitlines() if not re.match(r"step \d+/\d+ ", line)]


@pytest.mark.parametrize("page", OUTPUT_PAGES, ids=lambda page: page.name)
def test_command_outputs_are_what_a_fresh_run_prints(page, tmp_path, monkeypatch, clean_registry):
    """Each command's ``output`` block: ``evolora operators`` prints it; ``evolora evolve`` prints
    its first line (a first run on a CPU, as a new user's) and, where the block goes on, the run
    itself (run here, on the tiny model) prints the rest."""
    from typer.testing import CliRunner

    import evolora.model.device
    import evolora.model.resolve
    from evolora.cli import app
    from evolora.cli.display import start_line
    from evolora.config import load_config

    shutil.copytree(ROOT / "tasks", tmp_path / "tasks")
    for block in blocks(page):
        if block.title:
            (tmp_path / block.title).write_text(block.code)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(evolora.model.resolve, "is_converted", lambda path: False)
    monkeypatch.setattr(evolora.model.device, "resolve_device", lambda name: torch.device("cpu"))
    commands = shown_commands(page)
    assert len(commands) >= 3
    for args, output in commands:
        if args[0] == "operators":
            result = CliRunner().invoke(app, args)
            assert result.exit_code == 0 and _lines(result.stdout) == _lines(output), result.stdout
            continue
        assert args[0] == "evolve"
        config, sets, out = _settings(args)
        first, *rest = output.splitlines()
        assert start_line(load_config(config, sets), out, resume=False) == first
        if rest:  # a fast run: the whole of what it prints
            result = CliRunner().invoke(app, [*args, "--set", "model.num_threads=1"])
            assert result.exit_code == 0 and _lines(result.stdout) == _lines("\n".join(rest)), result.stdout
