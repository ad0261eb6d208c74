"""Every common decoder architecture trains LoRA on all of its decoder linear layers by default,
fused ones included (Phi-3 ``qkv_proj``/``gate_up_proj``, GPT-NeoX ``query_key_value``), and the
routed engine gives PEFT's logits on them."""

from __future__ import annotations

import json

import pytest
import torch
from arch_helpers import ARCHITECTURES, LINEAR_LAYERS, LLAMA_LINEAR, tiny_decoder

from evolora.bank.local import AdapterBank
from evolora.config import LoRAConfig
from evolora.generation.routed import BASE, routed
from evolora.learner import Sample, completion_logprobs
from evolora.model.targets import block_linear_names, resolve_target_modules

SAMPLES = [
    Sample((5, 6, 7, 8), (10, 11, 2), 1.0, "g"),
    Sample((12, 13), (14, 15, 16, 2), 0.0, "g"),
    Sample((20, 21, 22), (23, 2), 0.5, "h"),
]


@pytest.mark.parametrize("model_type", sorted(ARCHITECTURES))
def test_all_linear_covers_every_decoder_linear_layer(model_type):
    model = tiny_decoder(model_type)
    expected = LINEAR_LAYERS.get(model_type, LLAMA_LINEAR)
    assert set(block_linear_names(model)) == set(expected)
    assert LoRAConfig().target_modules == "all-linear"
    linear = [
        n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n.rsplit(".", 1)[-1] in expected
    ]
    bank = AdapterBank(model, ["A0", "A1"], rank=2, alpha=4)  # the default: all-linear
    assert sorted(bank.layers) == sorted(linear) and len(bank.layers) == 2 * len(expected)
    head = bank.model.get_output_embeddings()
    assert not any(layer is head for layer in bank.layers.values())


@pytest.mark.parametrize("model_type", sorted(ARCHITECTURES))
def test_routed_logprobs_equal_peft_on_every_architecture(model_type):
    bank = AdapterBank(tiny_decoder(model_type), ["A0", "A1"], rank=2, alpha=4)
    generator = torch.Generator().manual_seed(0)
    for slot in bank.slots:
        bank.init_factors(slot, generator, b_std=0.3)
    names = ["A0", "A1", BASE]
    with torch.no_grad(), routed(bank, names):
        logp, _ = completion_logprobs(bank.model, SAMPLES)
    for row, name in enumerate(names):
        with torch.no_grad():
            if name == BASE:
                with bank.model.disable_adapter():
                    ref = completion_logprobs(bank.model, [SAMPLES[row]])[0]
            else:
                bank.model.set_adapter(name)
                ref = completion_logprobs(bank.model, [SAMPLES[row]])[0]
        n = len(SAMPLES[row].completion_ids)
        assert torch.allclose(logp[row, :n], ref[0, :n], atol=1e-5), (model_type, name)
    delta = (logp[0] - logp[2]).abs().max()
    assert delta > 1e-4  # the adapters change the output: the comparison above is not vacuous


@pytest.mark.parametrize("model_type", ["phi3", "gpt_neox"])
def test_an_update_trains_the_fused_layers(model_type, single_thread):
    bank = AdapterBank(tiny_decoder(model_type), ["A0"], rank=2, alpha=4)
    bank.init_factors("A0", torch.Generator().manual_seed(0), b_std=0.1)
    before = bank.get_factors("A0")
    optimizer = bank.new_optimizer("A0", lr=1e-2, weight_decay=0.0)
    result = bank.update(
        {"A0": (optimizer, SAMPLES)},
        algorithm="grpo",
        clip_eps=0.2,
        kl_coef=0.0,
        epochs=1,
        micro_batch=4,
        max_grad_norm=1.0,
    )["A0"]
    assert result.finite
    after = bank.get_factors("A0")
    changed = {name.rsplit(".", 1)[-1] for name in before if not torch.equal(before[name][1], after[name][1])}
    assert changed == set(LINEAR_LAYERS[model_type])  # every layer kind learned, the fused ones included


def test_explicit_lists_still_work_and_unknown_names_are_refused():
    model = tiny_decoder("phi3")
    assert resolve_target_modules(model, ("qkv_proj",)) == ("qkv_proj",)
    with pytest.raises(ValueError, match=r"\['q_proj'\] match no linear layer.*qkv_proj"):
        resolve_target_modules(model, ("q_proj", "qkv_proj"))
    with pytest.raises(ValueError, match="all-linear"):
        resolve_target_modules(model, "everything")


@pytest.mark.parametrize("model_type", sorted(ARCHITECTURES))
def test_a_saved_adapter_reloads_in_peft_with_the_same_logprobs(model_type, tmp_path):
    from peft import PeftModel

    bank = AdapterBank(tiny_decoder(model_type), ["A0"], rank=2, alpha=4)
    bank.init_factors("A0", torch.Generator().manual_seed(1), b_std=0.3)
    bank.save_adapter("A0", tmp_path / "adapter")
    reloaded = PeftModel.from_pretrained(tiny_decoder(model_type), tmp_path / "adapter").eval()
    with torch.no_grad(), routed(bank, ["A0"] * len(SAMPLES)):
        ours, mask = completion_logprobs(bank.model, SAMPLES)
    with torch.no_grad():
        theirs, _ = completion_logprobs(reloaded, SAMPLES)
        with reloaded.disable_adapter():
            bare, _ = completion_logprobs(reloaded, SAMPLES)
    assert torch.allclose(ours[mask], theirs[mask], atol=1e-5)
    assert (ours[mask] - bare[mask]).abs().max() > 1e-4  # the adapter was really reloaded


@pytest.mark.slow
@pytest.mark.parametrize("model_type", sorted(ARCHITECTURES))
def test_a_short_run_from_a_local_directory_trains_every_linear_layer(model_type, tmp_path):
    """``evolora evolve tasks/arith.yaml --set model.name=DIR`` on a saved ``model_type`` decoder: the
    default config runs with an evolution step (merge crossover children), and every final adapter
    has factors on each decoder linear layer of both blocks."""
    from safetensors.torch import load_file
    from typer.testing import CliRunner

    from evolora.cli import app
    from evolora.model.tiny import tiny_tokenizer

    directory = tmp_path / model_type
    tiny_decoder(model_type).save_pretrained(directory)
    tiny_tokenizer().save_pretrained(directory)
    out = tmp_path / "run"
    done = CliRunner().invoke(
        app,
        [
            "evolve",
            "tasks/arith.yaml",
            "--out",
            str(out),
            "--set",
            f"model.name={directory}",
            "--set",
            "model.dtype=float32",
            "--set",
            "run.steps=2",
            "--set",
            "eval.limit=0",
            "--set",
            "evolution.every=1",
            "--set",
            "evolution.crossover_rate=1.0",
            "--set",
            "selfplay.roles.teacher.max_new_tokens=6",
            "--set",
            "selfplay.roles.student.max_new_tokens=6",
        ],
    )
    assert done.exit_code == 0, done.output
    births = [b for line in (out / "metrics.jsonl").read_text().splitlines() for b in json.loads(line)["births"]]
    assert births and all(len(b["parents"]) == 2 for b in births), births  # merge children of two parents
    adapters = sorted((out / "final").glob("*/adapter_model.safetensors"))
    assert len(adapters) == 4
    for path in adapters:
        keys = load_file(str(path)).keys()
        for layer in range(2):
            for leaf in LINEAR_LAYERS.get(model_type, LLAMA_LINEAR):
                assert any(f"layers.{layer}." in k and f".{leaf}.lora_A" in k for k in keys), (path, layer, leaf)
