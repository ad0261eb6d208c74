"""The speed part of ``benchmarks/gpu_check.py``: the graph engine's decode on one device, measured and asserted.

Per model (SmolLM2-135M-Instruct when installed, and a random-weight model of Qwen2.5-0.5B's
shapes built from a config, no download), in the GPU's bf16:

* ms per decode step, bare (every row ``"__base__"``) and routed (rows round robin over 8
  adapters), at each batch of :data:`BATCHES`: (t(N) − t(N/2)) / (N/2) with CUDA events, so the
  prefill and the captures (done in an untimed first call) cancel out;
* tok/s of the same rows through ``transformers``' ``generate`` (bare base, adapters off), and
  the ratio graph/HF;
* graph vs eager parity on the device in fp32 without TF32: a mixed batch (8 adapters and bare
  rows), greedy and sampled with a device generator, equal tokens;
* GPU memory over 100 rollout batches of varied sizes: no growth once each bucket has run once.

Assertions are the rollout engine's targets (:data:`TARGETS`), only on CUDA. ``quick`` runs the
same code on tiny models at tiny sizes (on the CPU: the smoke test), asserting parity only.
"""

from __future__ import annotations

import statistics
import time

import torch

from evolora.generation.types import Sampling

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
BATCHES = (16, 64, 128, 256)
TOKENS = 64
"""New tokens per row in the timed decodes (every row writes all of them: min_new_tokens)."""

TARGETS = {
    "step_ms_64": 3.0,  # SmolLM2-135M, batch 64, ms per decode step (bare)
    "step_ms_256": 4.0,  # SmolLM2-135M, batch 256
    "routed_over_bare": 0.8,  # routed 8 adapters / bare tok/s, every batch
    "graph_over_hf_128": 8.0,  # graph bare / HF generate bare tok/s at batch 128
    "qwen_tok_s_256": 40_000,  # Qwen2.5-0.5B shapes, batch 256, routed decode tok/s
    "memory_growth_mb": 16.0,  # allocated GPU memory after 100 rollout batches minus before (buckets warm)
}

QWEN_05B = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=32768,
    rope_theta=1e6,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    hidden_act="silu",
)
"""Qwen2.5-0.5B-Instruct's config.json shapes (494 M parameters)."""

SMOLLM2_135M = dict(
    hidden_size=576,
    intermediate_size=1536,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    vocab_size=49152,
    max_position_embeddings=8192,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    hidden_act="silu",
)
"""SmolLM2-135M-Instruct's config.json shapes (135 M parameters), for random-weight speed runs."""

QWEN_TINY = dict(
    QWEN_05B,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=256,
)


class Clock:
    """Seconds of a call: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def __call__(self, call) -> float:
        if not self.cuda:
            began = time.perf_counter()
            call()
            return time.perf_counter() - began
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def random_shaped(device: str, dtype: torch.dtype, shapes: dict, family: str = "qwen2"):
    """A random-weight causal LM (``family`` ``qwen2`` or ``llama``) of the given config shapes,
    built from a config: no file is read. Seeded (0), frozen, in eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_class, model_class = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}[
        family
    ]
    config = config_class(**shapes, torch_dtype=dtype)
    config.eos_token_id, config.pad_token_id = 1, 0
    with torch.device(device):
        torch.manual_seed(0)
        model = model_class(config).to(dtype)
    model.requires_grad_(False)
    return model.eval()


def make_bank(model, adapters: int = 8):
    from evolora.population import AdapterBank

    slots = [f"A{i}" for i in range(adapters)]
    bank = AdapterBank(model, slots, rank=8, alpha=16, target_modules=MODULES)
    generator = torch.Generator().manual_seed(0)
    for slot in slots:
        bank.init_factors(slot, generator, b_std=0.02)
    return bank


def rows(vocab: int, batch: int, width: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, width) left-padded random prompts of lengths width/2..width, and their attention."""
    generator = torch.Generator().manual_seed(batch)
    ids = torch.randint(2, vocab, (batch, width), generator=generator)
    lengths = torch.randint(width // 2, width + 1, (batch,), generator=generator)
    attention = (torch.arange(width)[None] >= width - lengths[:, None]).long()
    return (ids * attention).to(device), attention.to(device)


def speed(bank, label: str, device: torch.device, *, batches, tokens: int, width: int, hf: bool) -> list[dict]:
    """Per batch: ms per step bare and routed, tok/s of the graph engine and of HF generate."""
    from evolora.generation.graph import GraphDecoder
    from evolora.generation.routed import BASE, routed

    clock, engine, vocab = Clock(device), GraphDecoder(bank), bank.model.config.vocab_size
    results = []
    for batch in batches:
        ids, attention = rows(vocab, batch, width, device)
        mixed = [bank.slots[i % len(bank.slots)] for i in range(batch)]

        def run(names, n):
            return lambda: engine.decode(
                ids,
                attention,
                names,
                Sampling(max_new_tokens=n, greedy=True),
                eos_ids={1},
                pad_id=0,
                generator=None,
                min_new_tokens=n,
            )

        figures = {"batch": batch}
        for kind, names in (("bare", [BASE] * batch), ("routed", mixed)):
            run(names, tokens)()  # captures every step of the call, untimed
            full = statistics.median(clock(run(names, tokens)) for _ in range(3))
            half = statistics.median(clock(run(names, tokens // 2)) for _ in range(3))
            figures[f"{kind}_ms"] = (full - half) / (tokens - tokens // 2) * 1e3
            figures[f"{kind}_tok_s"] = batch * tokens / full
        if hf:

            def generate():
                with routed(bank, [BASE] * batch):
                    bank.model.generate(
                        input_ids=ids,
                        attention_mask=attention,
                        max_new_tokens=tokens,
                        min_new_tokens=tokens,
                        do_sample=False,
                        pad_token_id=0,
                        eos_token_id=1,
                    )

            generate()
            figures["hf_tok_s"] = batch * tokens / clock(generate)
        results.append(figures)
        line = (
            f"  {label} batch {batch}: step {figures['bare_ms']:.2f} ms bare, {figures['routed_ms']:.2f} ms routed "
            f"(8 adapters); {figures['bare_tok_s']:.0f} / {figures['routed_tok_s']:.0f} tok/s "
            f"(routed/bare {figures['routed_tok_s'] / figures['bare_tok_s']:.2f})"
        )
        if hf:
            line += (
                f"; HF generate {figures['hf_tok_s']:.0f} tok/s, graph/HF "
                f"{figures['bare_tok_s'] / figures['hf_tok_s']:.1f}x"
            )
        print(line, flush=True)
    return results


def parity(bank, device: torch.device, *, batch: int, tokens: int, width: int) -> int:
    """Graph vs eager tokens on the device, greedy and sampled (a device generator), for a mixed
    batch of adapters and bare rows. Asserts equality; returns the tokens compared."""
    from evolora.generation.decode import decode
    from evolora.generation.graph import GraphDecoder
    from evolora.generation.routed import BASE, routed

    engine = GraphDecoder(bank)
    ids, attention = rows(bank.model.config.vocab_size, batch, width, device)
    names = [(bank.slots + [BASE])[i % (len(bank.slots) + 1)] for i in range(batch)]
    compared = 0
    for options in (dict(greedy=True, temperature=1.0, top_p=1.0), dict(greedy=False, temperature=0.8, top_p=0.9)):
        generator = torch.Generator(device=device).manual_seed(7)
        sampling = Sampling(max_new_tokens=tokens, **options)
        with torch.no_grad():
            eager = decode(
                bank.model,
                ids,
                attention,
                names,
                sampling,
                eos_ids={1},
                pad_id=0,
                generator=generator,
                context=lambda r: routed(bank, r),
            )
        generator = torch.Generator(device=device).manual_seed(7)
        graph = engine.decode(ids, attention, names, sampling, eos_ids={1}, pad_id=0, generator=generator)
        same = eager.shape == graph.shape and torch.equal(eager, graph)
        if not same:
            diff = (eager[:, : graph.shape[1]] != graph[:, : eager.shape[1]]).nonzero()
            raise AssertionError(
                f"graph and eager tokens differ on {device} ({options}); first at (row, step) "
                f"{diff[0].tolist() if len(diff) else 'length'}"
            )
        compared += eager.numel()
    return compared


def memory_growth(bank, device: torch.device, *, batches: int = 100, tokens: int = 16, width: int = 48) -> float:
    """MB of allocated GPU memory after ``batches`` sampled rollout batches (8..64 rows, varied prompt
    lengths) minus before them, once a warm-up batch of each bucket (64, 32, 16, 8) captured its steps."""
    from evolora.generation.graph import GraphDecoder

    engine, vocab = GraphDecoder(bank), bank.model.config.vocab_size
    generator = torch.Generator().manual_seed(0)

    def rollout(batch: int, seed: int) -> None:
        ids, attention = rows(vocab, batch, width, device)
        names = [bank.slots[i % len(bank.slots)] for i in range(batch)]
        engine.decode(
            ids,
            attention,
            names,
            Sampling(max_new_tokens=tokens, temperature=1.0, top_p=0.95),
            eos_ids={1},
            pad_id=0,
            generator=torch.Generator(device=device).manual_seed(seed),
        )

    for batch in (64, 32, 16, 8):
        rollout(batch, batch)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(device)
    for k in range(batches):
        rollout(int(torch.randint(8, 65, (1,), generator=generator)), k)
    torch.cuda.synchronize()
    return (torch.cuda.memory_allocated(device) - before) / 2**20


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def run_speed(
    device_name: str, *, quick: bool, smollm: bool, qwen: bool = True, smollm_random: bool = False
) -> list[str]:
    """Every measurement above (the Qwen2.5-0.5B-shaped model only with ``qwen``; with
    ``smollm_random`` a random-weight model of SmolLM2-135M's shapes stands in for the embedded
    one, so no file is needed); returns the failed checks: parity anywhere, the targets on CUDA
    only (empty: all passed)."""
    from evolora.model import load_base

    device = torch.device(device_name)
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    batches, tokens, width = ((2, 4), 8, 12) if quick else (BATCHES, TOKENS, 48)
    failed: list[str] = []

    models = []
    if smollm_random and not quick:
        models.append(("SmolLM2-135M", lambda d: random_shaped(device_name, d, SMOLLM2_135M, "llama")))
    elif smollm and not quick:
        models.append(
            ("SmolLM2-135M", lambda d: load_base("smollm2-135m-instruct", dtype=_name(d), device=device_name)[0])
        )
    if quick:
        models.append(("tiny-random", lambda d: load_base("tiny-random", dtype=_name(d), device=device_name)[0]))
    if qwen:
        models.append(
            (
                "Qwen2 tiny" if quick else "Qwen2.5-0.5B shapes",
                lambda d: random_shaped(device_name, d, QWEN_TINY if quick else QWEN_05B),
            )
        )
    for label, build in models:
        bank = make_bank(build(torch.float32))
        try:
            compared = parity(bank, device, batch=16 if not quick else 4, tokens=24 if not quick else 6, width=width)
            print(
                f"  {label} parity on {device}, fp32: graph and eager tokens equal (greedy and sampled, "
                f"{compared} tokens, 8 adapters and bare rows)",
                flush=True,
            )
        except AssertionError as error:  # reported with the targets, after every figure is printed
            print(f"  {label} parity FAILED: {error}", flush=True)
            failed.append(f"{label} parity")
        del bank
        bank = make_bank(build(dtype))
        results = speed(bank, label, device, batches=batches, tokens=tokens, width=width, hf=True)
        if cuda and label == "SmolLM2-135M":
            by = {r["batch"]: r for r in results}
            checks = [
                (by[64]["bare_ms"] <= TARGETS["step_ms_64"], f"step at batch 64 {by[64]['bare_ms']:.2f} ms"),
                (by[256]["bare_ms"] <= TARGETS["step_ms_256"], f"step at batch 256 {by[256]['bare_ms']:.2f} ms"),
                (by[128]["bare_tok_s"] / by[128]["hf_tok_s"] >= TARGETS["graph_over_hf_128"], "graph/HF at 128"),
            ]
            checks += [
                (r["routed_tok_s"] / r["bare_tok_s"] >= TARGETS["routed_over_bare"], f"routed/bare at {r['batch']}")
                for r in results
            ]
            failed += [what for ok, what in checks if not ok]
        if cuda and label == "Qwen2.5-0.5B shapes":
            rate = next(r for r in results if r["batch"] == 256)["routed_tok_s"]
            if rate < TARGETS["qwen_tok_s_256"]:
                failed.append(f"Qwen2.5-0.5B shapes at batch 256: {rate:.0f} tok/s")
        if cuda and label == "SmolLM2-135M":
            growth = memory_growth(bank, device)
            print(f"  GPU memory over 100 rollout batches (8-64 rows, sampled): {growth:+.1f} MB", flush=True)
            if growth > TARGETS["memory_growth_mb"]:
                failed.append(f"memory grew {growth:.1f} MB")
        del bank
        if cuda:
            torch.cuda.empty_cache()
    return failed
