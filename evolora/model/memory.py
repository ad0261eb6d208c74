"""Expected accelerator memory of a run, computed from the model's shapes (its ``config.json``).

    shapes = ModelShapes.from_config(json.load(open("config.json")))
    estimate = memory_estimate(shapes, RunShape(dtype_bytes=2, rank=8, slots=8, members=8,
                                                rollout_rows=128, rollout_tokens=768, train_rows=16,
                                                train_tokens=768))
    estimate["total"]   # bytes

Exact from the shapes: the base weights, the LoRA factors (every slot, and the bank's copy of
the last finite factors), the AdamW state and gradients of every member, and the KV cache of
one rollout batch. Approximate: the decode step's logits, the LM-head chunks of the log-probs,
and the training activations with decoder-layer checkpointing (each layer's input kept, one
layer recomputed at a time). Allocator slack and the CUDA context (~0.3-0.5 GB) come on top.
Llama-like decoders (q/k/v/o + gate/up/down; the parameter count checked on Llama, Qwen2,
Qwen3 and Mistral).
Source: PopuLoRA (arXiv 2605.16727) §2 (one frozen base shared by every adapter).
"""

from __future__ import annotations

from dataclasses import dataclass

LORA_BYTES = 4
"""Adapter factors, their gradients and AdamW moments are float32 whatever the base dtype."""

LOGPROB_CHUNK = 128
"""Positions per LM-head chunk of the log-probs (:data:`evolora.generation.logprobs.CHUNK`)."""


@dataclass(frozen=True)
class ModelShapes:
    """The sizes of a Llama-like decoder that memory depends on (from ``config.json``)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    qkv_bias: bool
    qk_norm: bool = False

    @classmethod
    def from_config(cls, config: dict) -> ModelShapes:
        """The shapes of a ``config.json`` dict (``hidden_size``, ``num_hidden_layers``, ...).

        Raises:
            KeyError: a required key is missing.
        """
        heads = config["num_attention_heads"]
        return cls(
            hidden=config["hidden_size"],
            layers=config["num_hidden_layers"],
            heads=heads,
            kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            intermediate=config["intermediate_size"],
            vocab=config["vocab_size"],
            tied=bool(config.get("tie_word_embeddings", False)),
            qkv_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")),
            qk_norm=config.get("model_type") == "qwen3",
        )

    def linears(self) -> dict[str, tuple[int, int]]:
        """(d_in, d_out) of each linear module of one decoder layer."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    def parameters(self) -> int:
        """Every parameter of the model: embeddings, LM head (unless tied), decoder layers, norms."""
        linears = self.linears()
        per_layer = sum(d_in * d_out for d_in, d_out in linears.values()) + 2 * self.hidden  # + 2 RMSNorms
        if self.qkv_bias:
            per_layer += sum(linears[m][1] for m in ("q_proj", "k_proj", "v_proj"))
        if self.qk_norm:  # Qwen3: an RMSNorm over each query and key head
            per_layer += 2 * self.head_dim
        heads = 1 if self.tied else 2
        return heads * self.vocab * self.hidden + self.layers * per_layer + self.hidden

    def lora_parameters(self, rank: int, targets: tuple[str, ...] | None = None) -> int:
        """Floats of one adapter: r · (d_in + d_out) per target module per layer (None: all linear)."""
        linears = self.linears()
        names = tuple(linears) if targets is None else targets
        return self.layers * sum(rank * sum(linears[name]) for name in names)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Bytes of keys and values one token adds to the cache, over every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class RunShape:
    """What a run's config says about memory.

    Attributes:
        dtype_bytes: bytes per base weight and activation (2: bfloat16, 4: float32).
        rank: LoRA rank; targets: module names (None: all linear).
        slots: adapter slots (members plus hall of fame); members: adapters with an optimizer.
        rollout_rows: rows of one decode batch (``selfplay.generation_batch_size`` or
            ``eval.batch_size``, the larger); rollout_tokens: prompt plus generated tokens per row.
        train_rows: rows of one training micro-batch (``learner.micro_batch``); train_tokens:
            prompt plus completion tokens per row.
    """

    dtype_bytes: int
    rank: int
    slots: int
    members: int
    rollout_rows: int
    rollout_tokens: int
    train_rows: int
    train_tokens: int
    targets: tuple[str, ...] | None = None


def memory_estimate(shapes: ModelShapes, run: RunShape) -> dict[str, int]:
    """Bytes of each part of a run's accelerator memory, and their ``total``.

    Returns:
        {"weights", "adapters" (factors of every slot and their last-finite copy), "optimizer"
        (AdamW moments and gradients of every member), "kv_cache" (one rollout batch),
        "logits" (decode-step scores and sampling noise, fp32), "logprob_chunks" (three fp32
        (chunk, V) tensors), "activations" (checkpointed layer inputs of one micro-batch plus one
        layer recomputed: its attention and MLP intermediates), "total"}.
    """
    adapter = shapes.lora_parameters(run.rank, run.targets) * LORA_BYTES
    tokens = run.train_rows * run.train_tokens
    recompute = tokens * (
        3 * shapes.intermediate + 4 * shapes.hidden + 2 * (shapes.heads + 2 * shapes.kv_heads) * shapes.head_dim
    )
    parts = {
        "weights": shapes.parameters() * run.dtype_bytes,
        "adapters": 2 * run.slots * adapter,
        "optimizer": 3 * run.members * adapter,
        "kv_cache": run.rollout_rows * run.rollout_tokens * shapes.kv_bytes_per_token(run.dtype_bytes),
        "logits": 2 * run.rollout_rows * shapes.vocab * 4,
        "logprob_chunks": 3 * LOGPROB_CHUNK * shapes.vocab * 4,
        "activations": (tokens * shapes.hidden * shapes.layers + recompute) * run.dtype_bytes,
    }
    parts["total"] = sum(parts.values())
    return parts
