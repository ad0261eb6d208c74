"""The GSM8K test split shipped inside the package: complete, identical to the source file,
the default held-out set of the gsm task, and named in the run's summary."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from evolora.tasks import GSMTask
from evolora.tasks.gsm.data import BUNDLED_TEST, BUNDLED_TEST_ROWS, load_bundled_test, load_gsm8k

SHARED_TEST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k" / "test.jsonl"


def test_bundled_split_has_every_test_problem_and_its_license():
    items = load_bundled_test()
    assert len(items) == BUNDLED_TEST_ROWS == 1319
    assert all(isinstance(item.answer, float) for item in items)
    license_text = (BUNDLED_TEST.parent / "GSM8K_LICENSE").read_text()
    assert "MIT License" in license_text and "OpenAI" in license_text
    assert BUNDLED_TEST.stat().st_size < 400_000  # gzipped: ~0.24 MB of the ~0.75 MB jsonl


@pytest.mark.skipif(not SHARED_TEST.is_file(), reason="../shared/data/gsm8k/test.jsonl is not beside this clone")
def test_bundled_split_matches_the_source_file():
    bundled = [json.loads(line) for line in gzip.open(BUNDLED_TEST, "rt", encoding="utf-8") if line.strip()]
    source = [json.loads(line) for line in SHARED_TEST.open(encoding="utf-8") if line.strip()]
    assert len(bundled) == len(source)
    for index in (0, -1):
        assert bundled[index]["question"] == source[index]["question"]
        assert bundled[index]["answer"] == source[index]["answer"]
    assert [i.answer for i in load_bundled_test()] == [i.answer for i in load_gsm8k(SHARED_TEST)]


def test_gsm_task_uses_the_bundled_split_unless_a_path_is_given(tmp_path):
    task = GSMTask()
    items = task.held_out(5, random.Random(0))
    assert [i.question for i in items] == [i.question for i in load_bundled_test()[:5]]
    assert "bundled" in task.held_out_source and "1319" in task.held_out_source

    own = tmp_path / "mine.jsonl"
    own.write_text(json.dumps({"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"}) + "\n")
    task = GSMTask(eval_path=str(own))
    assert [(i.question, i.answer) for i in task.held_out(5, random.Random(0))] == [("What is 2 + 3?", 5.0)]
    assert str(own) in task.held_out_source


def test_a_gzipped_path_is_read_like_a_plain_one(tmp_path):
    path = tmp_path / "few.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"question": "q", "answer": "#### 1,234"}) + "\n")
    assert [i.answer for i in load_gsm8k(path)] == [1234.0]
