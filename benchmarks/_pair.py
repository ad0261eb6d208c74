"""Whole ``evolora evolve`` runs started side by side: the cells of ``contention.py --workload pair``.

Each run is a separate process (``evolora evolve CONFIG --out DIR`` of this checkout, in a process
group of its own, evaluation off), so the thread policy (``model.num_threads``) acts as it does for a user
who starts a second run from another terminal. The runs of one cell start at the same moment, in
run directories under different parents (no siblings), and their step times are read from their
``metrics.jsonl`` (``seconds.total``: the step alone, without the model load or the final write).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from evolora.cli import app; sys.argv[0] = 'evolora'; sys.exit(app())"
NOTE = re.compile(r"torch\s+uses\s+(\d+)\s+thread")


def evolve_command(config: str, out: Path, setting: str, steps: int, overrides: list[str]) -> list[str]:
    """The command line of one run: ``steps`` steps of ``config`` at ``model.num_threads=setting``."""
    sets = [f"model.num_threads={setting}", "eval.enabled=false", f"run.steps={steps}", *overrides]
    return [sys.executable, "-c", CLI, "evolve", config, "--out", str(out)] + [
        part for value in sets for part in ("--set", value)
    ]


def run_together(count: int, config: str, setting: str, steps: int, overrides: list[str]) -> list[dict]:
    """Start ``count`` runs of ``config`` at once and wait for them all.

    Returns:
        One dict per run: ``seconds`` (each step's wall seconds, ``steps`` of them) and ``threads``
        (the counts its ``note:`` lines named, in order; empty when ``auto`` said nothing, i.e.
        it took every core, or for a fixed setting) and ``notes`` (its ``note:`` lines).

    Raises:
        RuntimeError: a run exited with an error; the message holds the end of its output.
    """
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env["COLUMNS"] = "400"  # one note per line
    with tempfile.TemporaryDirectory(prefix="contention-pair-") as parent:
        outs = [Path(parent) / f"r{i}" / "run" for i in range(count)]
        children = [
            subprocess.Popen(
                evolve_command(config, out, setting, steps, overrides),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                start_new_session=True,
            )
            for out in outs
        ]
        texts = [child.communicate()[0] for child in children]
        results = []
        for child, text, out in zip(children, texts, outs):
            if child.returncode != 0:
                raise RuntimeError(f"a run exited with {child.returncode}:\n{text[-3000:]}")
            records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line]
            results.append(
                {
                    "seconds": [r["seconds"]["total"] for r in records],
                    "threads": [int(n) for n in NOTE.findall(text)],
                    "notes": [line.strip() for line in text.splitlines() if line.startswith("note:")],
                }
            )
    return results
