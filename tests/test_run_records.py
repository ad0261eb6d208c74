"""A run's records do not change: a tiny run with teachers, students and critics reproduces the
stored ``metrics.jsonl``, ``matches.jsonl`` and summary, key order included (wall-clock values
aside): every text, count and flag exactly, every float to a relative 1e-5. The tolerance is for
another CPU, whose GEMM kernels round differently in the last bits; on one host the records are
equal bit for bit, and a change to what a run does moves its numbers far more than that.

The reference (``tests/data/critic_run_records.json``) was written by this test with
``EVOLORA_WRITE_RECORDS=1``; a change that moves a single number of a run fails here. Rewrite it
only for a change that is meant to change what runs do, and say so in the commit.
"""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path

from run_helpers import TINY_OVERRIDES, judged_toy

from evolora.callbacks import JsonlLogger
from evolora.config import config_from_dict
from evolora.io import read_jsonl
from evolora.model import load_base
from evolora.run import Run

REFERENCE = Path(__file__).parent / "data" / "critic_run_records.json"
FLOAT_TOLERANCE = 1e-5
"""Relative tolerance of a stored float (another CPU's last-bit rounding)."""
WALL_CLOCK = ("tokens_per_second", "peak_rss_mb")  # and the values of "seconds"
SUMMARY = ("steps", "individuals", "held_out", "lineage", "diversity", "critic_eval")


def _config():
    data = copy.deepcopy(TINY_OVERRIDES)
    data["population"] = {"roles": {"teacher": 2, "student": 2, "critic": 2}}
    data["run"]["steps"] = 3
    data["selfplay"].update(review={"samples": 2, "reviews": 2}, rewards={"refuted": -0.25, "survived": 0.5})
    data["eval"].update(critic_limit=2, critic_samples=2)
    return config_from_dict(data)


def _steady(record: dict) -> dict:
    """A metrics record without its wall-clock values, in its own key order (the phases timed kept)."""
    return {k: list(v) if k == "seconds" else v for k, v in record.items() if k not in WALL_CLOCK}


def _close(got, want, where: str = "") -> None:
    """Assert ``got`` equals ``want`` (JSON values): floats to :data:`FLOAT_TOLERANCE`, the rest exactly."""
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        same = math.isnan(got) and math.isnan(want)  # an undefined heritability (S = 0) stays undefined
        assert same or math.isclose(got, want, rel_tol=FLOAT_TOLERANCE, abs_tol=1e-9), (where, got, want)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), (where, list(got), list(want))
        for key in want:
            _close(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, got, want)
        for i, (g, w) in enumerate(zip(got, want)):
            _close(g, w, f"{where}[{i}]")
    else:
        assert got == want, (where, got, want)


def _records(out: Path, summary: dict) -> dict:
    return {
        "metrics": [_steady(r) for r in read_jsonl(out / "metrics.jsonl")],
        "matches": read_jsonl(out / "matches.jsonl"),
        "summary": {key: summary.get(key) for key in SUMMARY},
    }


def test_a_run_with_three_roles_reproduces_its_stored_records(tmp_path, single_thread):
    model, tokenizer = load_base("tiny-random")
    run = Run(_config(), tmp_path, model=model, tokenizer=tokenizer, task=judged_toy())
    run.train([JsonlLogger()])
    records = json.loads(json.dumps(_records(tmp_path, run.finish())))  # tuples as lists, as stored
    if os.environ.get("EVOLORA_WRITE_RECORDS"):
        REFERENCE.write_text(json.dumps(records, indent=1) + "\n")
    expected = json.loads(REFERENCE.read_text())
    assert records["metrics"][0]["critic"]["reviews"] > 0 and records["summary"]["critic_eval"]
    for key in ("metrics", "matches", "summary"):
        _close(records[key], expected[key], key)  # key order included
