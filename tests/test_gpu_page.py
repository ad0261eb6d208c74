"""The "Running on a GPU" page, as far as a machine without a GPU can check it: each in-process
``evolora evolve`` command the page gives for a GPU is a valid command that stops at once here
with exit status 2 and the one line the page shows, before it writes anything."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from evolora.cli import app

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "gpu.md").read_text()


def _gpu_commands() -> list[str]:
    """The page's in-process ``evolora evolve`` lines that ask for a GPU (comments dropped)."""
    lines = []
    for block in re.findall(r"^```bash\n(.*?)^```", PAGE, re.M | re.S):
        for line in block.splitlines():
            command = line.split("#", 1)[0].strip()
            if (
                command.startswith("evolora evolve tasks/")
                and "run.backend=ray" not in command
                and ("model.device=cuda" in command or "gsm-gpu.yaml" in command)
            ):
                lines.append(command)
    return lines


def test_the_page_gives_gpu_commands():
    assert len(_gpu_commands()) >= 3


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: run the commands themselves")
@pytest.mark.parametrize("command", _gpu_commands())
def test_each_gpu_command_stops_here_with_the_line_the_page_shows(command, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    args = shlex.split(command)[1:]
    if "--out" in args:
        args[args.index("--out") + 1] = str(tmp_path / "run")
    else:
        args += ["--out", str(tmp_path / "run")]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 2, done.output
    lines = done.output.strip().splitlines()
    shown = re.search(r"^error: model\.device=cuda but torch sees no CUDA GPU here.*$", PAGE, re.M)
    asked = re.search(r"model\.device=(cuda(?::\d+)?)", command)
    assert shown and len(lines) == 1
    assert lines[0] == shown[0].replace("model.device=cuda ", f"model.device={asked[1] if asked else 'cuda'} ")
    assert not (tmp_path / "run").exists()
