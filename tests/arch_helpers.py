"""Tiny random decoders of the common architectures, built from a config (no hub), for tests."""

from __future__ import annotations

import torch

ARCHITECTURES = {
    "llama": {},
    "qwen2": {},
    "qwen3": {"head_dim": 16},
    "mistral": {},
    "gemma3_text": {"head_dim": 16},
    "phi3": {},
    "gpt_neox": {"rotary_pct": 0.25},
}
"""model_type -> the config keys it needs beyond the shared tiny shape."""

LINEAR_LAYERS = {
    "phi3": ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"),
    "gpt_neox": ("query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"),
}
"""The decoder-block linear layers of each architecture (Llama-style names for the others)."""
LLAMA_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def tiny_decoder(model_type: str, seed: int = 0, layers: int = 2):
    """A frozen 2-layer random ``model_type`` decoder (vocab 128, hidden 64) in eval mode, fp32."""
    from transformers import AutoConfig, AutoModelForCausalLM

    shape = dict(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        **({} if model_type == "gpt_neox" else {"num_key_value_heads": 2}),
        **ARCHITECTURES[model_type],
    )
    config = AutoConfig.for_model(model_type, **shape)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    finally:
        torch.random.set_rng_state(generator_state)
    model.eval().requires_grad_(False)
    return model
