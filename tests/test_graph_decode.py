"""The static-shape decode step (run uncaptured on the CPU) gives the eager engine's tokens.

Both engines share the prefill and route the same mixed adapters (with ``"__base__"`` rows);
the graph engine then steps fixed-shape buffers: padding slots in a bucket, ended rows masked
rather than cut, a bucket that snaps smaller as rows end, host checks every k steps, stacked
factors refreshed in place, and the sampling draw on fixed buffers.
"""

from __future__ import annotations

import pytest
import torch
from bank_helpers import random_bank

from evolora.generation.decode import decode
from evolora.generation.graph import BUCKETS, GraphDecoder, bucket
from evolora.generation.kernels.stop_mask import FlaggedStop, stop_mask
from evolora.generation.mismatch import path_logprobs
from evolora.generation.rollout import chat_prompt, left_pad
from evolora.generation.routed import BASE, routed
from evolora.generation.static_step import decode_step
from evolora.generation.stops import StopOnText
from evolora.generation.types import Sampling
from evolora.learner import Sample

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
NAMES = ["A0", "A1", BASE, "A1", "A0", "A2"]
TEXTS = ("hi", "what is 2+2?", "x", "what is 2+2?", "hi", "a longer prompt here")
GREEDY = dict(greedy=True, temperature=1.0, top_p=1.0)


@pytest.fixture
def setup(tiny):
    model, tokenizer = tiny
    bank = random_bank(model, ["A0", "A1", "A2"], target_modules=MODULES, b_std=0.3)
    prompts = [chat_prompt(tokenizer, [{"role": "user", "content": t}]) for t in TEXTS]
    ids, attention = left_pad(prompts, tokenizer.pad_token_id)
    return bank, tokenizer, ids, attention


def _eager(bank, ids, attention, names, tokens, eos, pad, seed=5, stopped=None, min_new_tokens=0, **sampling):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        return decode(
            bank.model,
            ids,
            attention,
            names,
            Sampling(max_new_tokens=tokens, **sampling),
            eos_ids=eos,
            pad_id=pad,
            generator=generator,
            stopped=stopped,
            context=lambda rows: routed(bank, rows),
            min_new_tokens=min_new_tokens,
        )


def _graph(engine, ids, attention, names, tokens, eos, pad, seed=5, *, greedy, temperature, top_p, **options):
    sampling = Sampling(max_new_tokens=tokens, greedy=greedy, temperature=temperature, top_p=top_p)
    return engine.decode(
        ids,
        attention,
        names,
        sampling,
        eos_ids=eos,
        pad_id=pad,
        generator=torch.Generator().manual_seed(seed),
        **options,
    )


def _eos_that_ends_some_rows(free: torch.Tensor) -> set[int]:
    """Tokens some rows (not all) write at different steps: as EOS, >= 2 rows end, at different times."""
    eos: set[int] = set()
    for token in torch.bincount(free[:, 1:].flatten(), minlength=128).argsort(descending=True).tolist():
        trial = eos | {token}
        ends = [
            int(torch.nonzero(torch.isin(row, torch.tensor(sorted(trial))))[0])
            for row in free[:, 1:]
            if torch.isin(row, torch.tensor(sorted(trial))).any()
        ]
        if len(ends) < len(free):
            eos = trial
            if len(ends) >= 2 and len(set(ends)) > 1:
                return eos
    raise AssertionError("no tokens end only some rows")


@pytest.mark.parametrize(
    "sampling, check_every, overlap",
    [
        (GREEDY, 1, False),
        (GREEDY, 8, False),
        (GREEDY, 8, True),
        (dict(greedy=False, temperature=1.0, top_p=1.0), 3, True),
        (dict(greedy=False, temperature=0.7, top_p=0.9), 8, False),
    ],
)
def test_tokens_equal_eager_as_rows_end_and_the_bucket_snaps(setup, sampling, check_every, overlap):
    """With ``overlap`` (CUDA's order) each check is read after the next steps ran: the same tokens."""
    bank, tokenizer, ids, attention = setup
    pad = tokenizer.pad_token_id
    free = _eager(bank, ids, attention, NAMES, 24, set(), pad, **sampling)
    eos = _eos_that_ends_some_rows(free)
    ref = _eager(bank, ids, attention, NAMES, 24, eos, pad, **sampling)
    engine = GraphDecoder(bank, check_every=check_every, overlap=overlap)
    assert GraphDecoder(bank).overlap is False  # the CPU default
    ours = _graph(engine, ids, attention, NAMES, 24, eos, pad, **sampling)
    assert (ref == pad).any() and torch.equal(ours, ref)
    sizes = {key[0] for key in engine.steps}
    assert 8 in sizes and min(sizes) < 8  # 6 rows ran in bucket 8, then in a smaller one


def test_sampled_tokens_equal_with_min_new_tokens_and_every_row_ending(setup):
    bank, tokenizer, ids, attention = setup
    pad, options = tokenizer.pad_token_id, dict(greedy=False, temperature=0.8, top_p=0.95)
    free = _eager(bank, ids, attention, NAMES, 30, set(), pad, seed=9, **options)
    eos = set(free[:, 3:].flatten().unique().tolist()[:40])  # common tokens: every row ends early
    ref = _eager(bank, ids, attention, NAMES, 30, eos, pad, seed=9, min_new_tokens=3, **options)
    ours = _graph(
        GraphDecoder(bank, check_every=4), ids, attention, NAMES, 30, eos, pad, seed=9, min_new_tokens=3, **options
    )
    assert ref.shape[1] < 30 and torch.equal(ours, ref)
    assert not any(t in eos for t in ref[:, :3].flatten().tolist())


def test_stop_strings_checked_every_k_steps_give_eager_tokens(setup):
    bank, tokenizer, ids, attention = setup
    pad = tokenizer.pad_token_id
    free = _eager(bank, ids, attention, NAMES, 20, set(), pad, **GREEDY)
    texts = [tokenizer.decode(row[2:].tolist(), skip_special_tokens=True) for row in free]
    stop = next(c for text in texts for c in text if 1 < sum(c in t for t in texts) < len(texts) and c.strip())
    stopped = StopOnText(tokenizer, (stop,), 0).tails
    ref = _eager(bank, ids, attention, NAMES, 20, {tokenizer.eos_token_id}, pad, stopped=stopped, **GREEDY)
    ours = _graph(
        GraphDecoder(bank, check_every=5),
        ids,
        attention,
        NAMES,
        20,
        {tokenizer.eos_token_id},
        pad,
        stopped=stopped,
        **GREEDY,
    )
    assert (ref == pad).any() and torch.equal(ours, ref)
    flagged = FlaggedStop(stopped, stop_mask(tokenizer, (stop,), size=bank.model.config.vocab_size))
    eager = _eager(bank, ids, attention, NAMES, 20, {tokenizer.eos_token_id}, pad, stopped=flagged, **GREEDY)
    graph = _graph(
        GraphDecoder(bank, check_every=5, overlap=True),
        ids,
        attention,
        NAMES,
        20,
        {tokenizer.eos_token_id},
        pad,
        stopped=flagged,
        **GREEDY,
    )
    assert torch.equal(eager, ref) and torch.equal(graph, ref)  # only flagged rows decoded, the same ends


def test_refresh_copies_changed_factors_in_place(setup):
    bank, tokenizer, ids, attention = setup
    pad, eos = tokenizer.pad_token_id, {tokenizer.eos_token_id}
    engine = GraphDecoder(bank)
    before = _graph(engine, ids, attention, NAMES, 12, eos, pad, **GREEDY)
    stacked = [g.lora.a.data_ptr() for _, _, groups in engine.weights.layers for g in groups if g.lora is not None]
    bank.init_factors("A1", torch.Generator().manual_seed(42), b_std=0.5)
    stale = _graph(engine, ids, attention, NAMES, 12, eos, pad, **GREEDY)
    engine.refresh(["A1"])
    fresh = _graph(engine, ids, attention, NAMES, 12, eos, pad, **GREEDY)
    ref = _eager(bank, ids, attention, NAMES, 12, eos, pad, **GREEDY)
    assert torch.equal(fresh, ref) and not torch.equal(ref, before)
    assert not torch.equal(stale[[1, 3]], ref[[1, 3]])  # the A1 rows: decode steps used the old factors
    assert stacked == [
        g.lora.a.data_ptr() for _, _, groups in engine.weights.layers for g in groups if g.lora is not None
    ]
    with pytest.raises(KeyError, match="unknown adapter slots"):
        engine.refresh(["nope"])


def test_more_rows_than_a_bucket_and_all_base_rows(setup):
    """Nine rows (bucket 16, seven padding slots), base rows only in one call, then mixed again."""
    bank, tokenizer, ids, attention = setup
    pad, eos = tokenizer.pad_token_id, {tokenizer.eos_token_id}
    engine = GraphDecoder(bank, check_every=2)
    ids9, att9, names9 = torch.cat([ids, ids[:3]]), torch.cat([attention, attention[:3]]), NAMES + ["A2", BASE, "A0"]
    for names in (names9, [BASE] * 9):
        ref = _eager(bank, ids9, att9, names, 10, eos, pad, **GREEDY)
        assert torch.equal(_graph(engine, ids9, att9, names, 10, eos, pad, **GREEDY), ref)


@pytest.mark.parametrize("dtype, budget", [("float32", 1e-5), ("bfloat16", 0.05)])
def test_static_step_logprobs_within_the_mismatch_budget(dtype, budget):
    """Teacher-forced log-probs of the static step against the update's path, per token: 1e-5 nats in
    fp32; under a bf16 base, the bf16 budget of ``tests/test_mismatch.py`` (0.05 nats)."""
    from evolora.model import load_base

    model, tokenizer = load_base("tiny-random", dtype=dtype)
    bank = random_bank(model, ["A0", "A1", "A2"], target_modules=MODULES, b_std=0.3)
    prompts = [chat_prompt(tokenizer, [{"role": "user", "content": t}]) for t in TEXTS]
    ids, attention = left_pad(prompts, tokenizer.pad_token_id)
    pad = tokenizer.pad_token_id
    engine = GraphDecoder(bank)
    out = _graph(engine, ids, attention, NAMES, 10, set(), pad, **GREEDY)
    b = engine._buffers_for(8, 128)
    logits = engine._prefill(b, ids, attention, NAMES, 8)
    ours = [logits.log_softmax(-1).gather(1, out[:, :1])]
    with torch.no_grad():
        for s in range(out.shape[1] - 1):
            logits = decode_step(
                engine.weights, out[:, s], b.position[:6], b.column, b.kv[:, :, :6], b.valid[:6], b.onehot[:6], 128
            )
            b.position += 1
            b.column += 1
            ours.append(logits.log_softmax(-1).gather(1, out[:, s + 1 : s + 2]))
    ours = torch.cat(ours, dim=1)
    prompts = [tuple(row[a.bool()].tolist()) for row, a in zip(ids, attention)]
    samples = [Sample(p, tuple(o.tolist()), 0.0, "g") for p, o in zip(prompts, out)]
    train, mask = path_logprobs(bank, NAMES, samples, train=True)
    assert mask.all() and (ours.float() - train).abs().max() < budget


def test_buckets_and_bad_input(setup):
    bank, tokenizer, ids, attention = setup
    assert [bucket(n) for n in (1, 3, 8, 9, 33, 65, 500)] == [1, 4, 8, 16, 64, 96, 512]
    assert BUCKETS[-1] == 512 and len(BUCKETS) == 21
    with pytest.raises(ValueError, match="1 to 512 rows"):
        bucket(513)
    engine = GraphDecoder(bank)
    with pytest.raises(ValueError, match="max_new_tokens"):
        _graph(engine, ids, attention, NAMES, 0, set(), 0, **GREEDY)
    with pytest.raises(KeyError, match="unknown adapters"):
        _graph(engine, ids, attention, ["Z"] * 6, 4, set(), 0, **GREEDY)
    with pytest.raises(ValueError, match="check_every"):
        GraphDecoder(bank, check_every=0)
    with pytest.raises(ValueError, match="CUDA"):
        GraphDecoder(bank, capture=True)


def test_more_rows_than_the_largest_bucket_run_in_chunks(setup, monkeypatch):
    """Largest bucket 4 here: six rows run as 4 + 2, padded to the longer; greedy tokens as one batch."""
    import evolora.generation.graph as graph_module

    bank, tokenizer, ids, attention = setup
    pad = tokenizer.pad_token_id
    free = _eager(bank, ids, attention, NAMES, 12, set(), pad, **GREEDY)
    eos = _eos_that_ends_some_rows(free)
    ref = _eager(bank, ids, attention, NAMES, 12, eos, pad, **GREEDY)
    monkeypatch.setattr(graph_module, "BUCKETS", (1, 2, 4))
    assert torch.equal(_graph(GraphDecoder(bank), ids, attention, NAMES, 12, eos, pad, **GREEDY), ref)


@pytest.mark.parametrize("greedy, static_prefill", [(True, False), (False, False), (True, True), (False, True)])
def test_the_graph_engine_through_the_seam_gives_the_eager_engines_rollouts(tiny, greedy, static_prefill):
    """The real decoder behind :class:`GraphEngine` (uncaptured), some siblings not adapted (k_proj, gate/up):
    plain rows, stop strings, segments (each segment's call prefills the whole context so far); the eager
    prefill or the static one."""
    from evolora.generation.engine import EagerEngine, GraphEngine
    from evolora.generation.types import Segment

    model, tokenizer = tiny
    bank = random_bank(
        model, ["A0", "A1"], target_modules=("q_proj", "v_proj", "down_proj"), b_std=0.5, seed=3, tokenizer=tokenizer
    )
    prompts = [chat_prompt(tokenizer, [{"role": "user", "content": t}]) for t in ("a problem", "another one", "x")]
    names = ["A0", "A1", BASE]
    calls = [
        (Sampling(max_new_tokens=10, greedy=greedy, temperature=0.8, top_p=0.9), ()),
        (Sampling(max_new_tokens=16, greedy=True, stop=("e",), keep_stop=False), ()),
        (
            Sampling(max_new_tokens=9, temperature=0.01),
            (Segment(max_new_tokens=5), Segment(forced="\n```python\n", max_new_tokens=6)),
        ),
    ]
    eager = [
        bank.rollout(prompts, names, sampling, segments=segments, generator=torch.Generator().manual_seed(5))
        for sampling, segments in calls
    ]
    bank.engine = GraphEngine(bank.model, tokenizer, bank, lambda b: GraphDecoder(b, static_prefill=static_prefill))
    graph = [
        bank.rollout(prompts, names, sampling, segments=segments, generator=torch.Generator().manual_seed(5))
        for sampling, segments in calls
    ]
    for ours, ref in zip(graph, eager):
        assert [(c.completion_ids, c.truncated, c.mask) for c in ours] == [
            (c.completion_ids, c.truncated, c.mask) for c in ref
        ]
    bank.init_factors("A1", torch.Generator().manual_seed(8), b_std=0.5)  # the bank refreshes its engine
    greedy10 = Sampling(max_new_tokens=10, greedy=True)
    after = bank.rollout(prompts, names, greedy10)
    bank.engine = EagerEngine(bank.model, tokenizer, bank)
    assert [c.completion_ids for c in after] == [c.completion_ids for c in bank.rollout(prompts, names, greedy10)]


def test_fused_rotary_and_norm_equal_hfs_ops_bitwise_in_fp32(setup):
    """The q/k/v columns in the step's layout (with the halves-swapped copy) rotated with its shared
    tables give HF's ``apply_rotary_pos_emb`` bitwise (the scaling folded into q exactly) and keep v;
    its ``F.rms_norm`` equals HF's RMSNorm bitwise."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from evolora.generation.static_step import StaticWeights, _norm, qkv_order, step_tables

    bank = setup[0]
    w = StaticWeights(bank, swapped_copy=True)
    rows, d, hq, hk = 5, w.head_dim, w.heads, w.kv_heads
    generator = torch.Generator().manual_seed(1)
    hidden = torch.randn(rows, w.head.shape[1], generator=generator)
    position = torch.tensor([0, 3, 7, 30, 100])
    y = torch.randn(rows, hq + 2 * hk, d, generator=generator)
    assert w.flipped and torch.equal(
        w.layers[0][2][0].weight,
        torch.cat(
            [
                w.layers[0][1].q_proj.base_layer.weight,
                w.layers[0][1].k_proj.base_layer.weight,
                w.layers[0][1].v_proj.base_layer.weight,
            ]
        )[qkv_order(hq, hk, d, True)],
    )
    laid = y.flatten(1)[:, qkv_order(hq, hk, d, True)].view(rows, 2, hk, hq // hk + 2, d)
    cos, sin = step_tables(w, hidden, position)
    ours = laid[:, 0] * cos + laid[:, 1] * sin
    c, s = w.rotary(hidden, position[:, None])
    q, k = apply_rotary_pos_emb(y[:, :hq, None], y[:, hq : hq + hk, None], c, s)  # (R, H, 1, D): as HF's layout
    assert w.fold_scaling and torch.equal(ours[:, :, 2:].reshape(rows, hq, d), q[:, :, 0] * w.scaling)
    assert torch.equal(ours[:, :, 0], k[:, :, 0]) and torch.equal(ours[:, :, 1], y[:, hq + hk :])
    layer = w.layers[0][0]
    assert torch.equal(_norm(hidden, layer.input_layernorm), layer.input_layernorm(hidden))


@pytest.mark.parametrize("fold, swapped", [(False, False), (True, True), (False, True)])
def test_tokens_equal_eager_with_each_rotary_layout_and_scaling(setup, fold, swapped):
    """The halves-swapped copy from the q/k/v GEMM (CUDA's layout) or the swap as a kernel (the CPU's);
    a head dim whose scaling is not a power of two applies it in ``baddbmm`` (alpha), not in the tables."""
    from evolora.generation.static_step import StaticWeights

    bank, tokenizer, ids, attention = setup
    pad = tokenizer.pad_token_id
    free = _eager(bank, ids, attention, NAMES, 16, set(), pad, **GREEDY)
    eos = _eos_that_ends_some_rows(free)
    engine = GraphDecoder(bank, check_every=3)
    engine.weights = StaticWeights(bank, swapped_copy=swapped)
    engine.weights.fold_scaling = fold
    for sampling in (GREEDY, dict(greedy=False, temperature=0.9, top_p=0.9)):
        ref = _eager(bank, ids, attention, NAMES, 16, eos, pad, **sampling)
        assert torch.equal(_graph(engine, ids, attention, NAMES, 16, eos, pad, **sampling), ref)


@pytest.mark.parametrize("model_type", ["qwen2", "qwen3", "mistral"])
def test_tokens_equal_eager_for_each_supported_layer(model_type):
    """q/k/v biases (qwen2), q/k norms (qwen3): greedy and sampled tokens equal the eager engine's."""
    from arch_helpers import tiny_decoder

    bank = random_bank(tiny_decoder(model_type), ["A0", "A1"], target_modules=MODULES, b_std=0.3)
    ids = torch.randint(3, 128, (4, 7), generator=torch.Generator().manual_seed(0))
    attention = torch.ones_like(ids)
    attention[1, :3] = 0
    names = ["A0", BASE, "A1", "A0"]
    for sampling in (GREEDY, dict(greedy=False, temperature=0.9, top_p=0.95)):
        ref = _eager(bank, ids, attention, names, 12, set(), 0, **sampling)
        for swapped in (False, True):
            engine = GraphDecoder(bank)
            engine.weights = type(engine.weights)(bank, swapped_copy=swapped)
            assert torch.equal(_graph(engine, ids, attention, names, 12, set(), 0, **sampling), ref)
