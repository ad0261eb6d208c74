"""benchmarks/gsm_templates.py: the per-template tally of gsm `numbers` proposals, from run records."""

from __future__ import annotations

import json

from run_helpers import benchmark_module


def test_templates_count_valid_attempts_and_learnable_within_the_first_steps(tmp_path):
    eggs, bus = "Problem: A box holds {a} eggs.\n```python", "Problem: A bus has {a} seats.\n```python"
    matches = [
        {"step": 1, "proposal_text": eggs, "valid": True, "grades": ["correct", "wrong", "wrong", "wrong"]},
        {"step": 2, "proposal_text": eggs, "valid": True, "grades": ["correct"] * 4},
        {"step": 2, "proposal_text": bus, "valid": False, "grades": []},
        {"step": 5, "proposal_text": bus, "valid": True, "grades": ["correct", "wrong"]},  # after --steps 4
    ]
    (tmp_path / "matches.jsonl").write_text("".join(json.dumps(m) + "\n" for m in matches))
    table = benchmark_module("gsm_templates").template_table([tmp_path], steps=4)
    assert table["Problem: A box holds {a} eggs."] == {
        "proposals": 2,
        "valid": 2,
        "attempts": 8,
        "correct": 5,
        "learnable": 1,
    }
    assert table["Problem: A bus has {a} seats."] == {
        "proposals": 1,
        "valid": 0,
        "attempts": 0,
        "correct": 0,
        "learnable": 0,
    }
