"""The memory estimate's exact parts against real models: parameters, adapter floats, KV bytes."""

from __future__ import annotations

import pytest
import torch
from arch_helpers import tiny_decoder

from evolora.bank.local import AdapterBank
from evolora.model.memory import ModelShapes, RunShape, memory_estimate


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3", "mistral"])
def test_parameters_adapter_floats_and_kv_bytes_equal_the_real_model(model_type):
    model = tiny_decoder(model_type)
    shapes = ModelShapes.from_config(model.config.to_dict())
    assert shapes.parameters() == sum(p.numel() for p in model.parameters())
    assert shapes.lora_parameters(4, ("q_proj", "v_proj")) == sum(
        4 * (m.in_features + m.out_features)
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and n.endswith(("q_proj", "v_proj"))
    )
    bank = AdapterBank(model, ["a"], rank=4, alpha=8.0, target_modules="all-linear")
    assert shapes.lora_parameters(4) == bank.num_parameters()
    rows, tokens = 3, 5
    with torch.no_grad():
        cache = bank.model(
            input_ids=torch.ones(rows, tokens, dtype=torch.long, device="cpu"), use_cache=True
        ).past_key_values
    used = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    assert used == rows * tokens * shapes.kv_bytes_per_token(4)


def test_the_estimate_adds_its_parts_and_scales_with_the_run():
    shapes = ModelShapes(
        hidden=896,
        layers=24,
        heads=14,
        kv_heads=2,
        head_dim=64,
        intermediate=4864,
        vocab=151936,
        tied=True,
        qkv_bias=True,
    )  # Qwen2.5-0.5B's config.json
    assert shapes.parameters() == 494_032_768  # the published parameter count of Qwen2.5-0.5B
    run = RunShape(
        dtype_bytes=2, rank=8, slots=8, members=8, rollout_rows=128, rollout_tokens=768, train_rows=16, train_tokens=768
    )
    parts = memory_estimate(shapes, run)
    assert parts["total"] == sum(v for k, v in parts.items() if k != "total")
    assert parts["weights"] == 2 * 494_032_768
    assert (
        parts["adapters"] == 2 * 8 * shapes.lora_parameters(8) * 4
        and parts["optimizer"] == 3 * 8 * shapes.lora_parameters(8) * 4
    )
    assert parts["kv_cache"] == 128 * 768 * 2 * 24 * 2 * 64 * 2
    wider = memory_estimate(shapes, RunShape(**{**run.__dict__, "rollout_rows": 256}))
    assert wider["kv_cache"] == 2 * parts["kv_cache"] and wider["weights"] == parts["weights"]
