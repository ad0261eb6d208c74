"""The kernels wired into the static step: the backend is chosen once (torch on the CPU), the torch
path is bitwise the two dense GEMMs it always was, and the Triton path (interpreted on the CPU) adds
the same delta and gives the eager engine's tokens through the graph engine's loop."""

from __future__ import annotations

import pytest
import torch
from bank_helpers import random_bank
from kernel_helpers import kernels_module

import evolora.generation.kernels as kernels
from evolora.generation.lora_stack import DenseStack, slot_onehot

P, R, D_IN, WIDTHS = 3, 4, 16, (8, 4, 4)
MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _stack(backend, order=None, generator=None):
    """A 3-sibling stack (widths 8, 4, 4) with random factors in every slot."""
    generator = generator or torch.Generator().manual_seed(0)
    columns = torch.repeat_interleave(torch.arange(3), torch.tensor(WIDTHS))
    stack = DenseStack(
        P, 3, R, D_IN, sum(WIDTHS), dtype=torch.float32, device=torch.device("cpu"), columns=columns, backend=backend
    )
    if order is not None:
        stack.reorder(order)
    offsets = [sum(WIDTHS[:j]) for j in range(3)]
    for p in range(P):
        block = torch.zeros(3 * R, sum(WIDTHS))
        for j, width in enumerate(WIDTHS):
            block[j * R : (j + 1) * R, offsets[j] : offsets[j] + width] = torch.randn(R, width, generator=generator)
        stack.write_(p, [torch.randn(R, D_IN, generator=generator) for _ in WIDTHS], block)
    return stack


@pytest.fixture
def fresh_choice(monkeypatch):
    """The cached choice cleared before and after (another test's choice does not leak)."""
    monkeypatch.delenv(kernels.BACKEND_VARIABLE, raising=False)
    kernels._chosen.cache_clear()
    yield
    kernels._chosen.cache_clear()


def test_the_cpu_gets_the_torch_path_chosen_once(fresh_choice, monkeypatch):
    assert kernels.kernel_backend("cpu") == "torch"
    stack = _stack(None)
    assert stack.backend == "torch" and stack.add_ == stack.add_dense_
    tests = []
    monkeypatch.setattr(kernels, "triton_available", lambda: True)
    monkeypatch.setattr(kernels, "feature_test", lambda device: tests.append(device))
    assert [kernels.kernel_backend("cuda") for _ in range(3)] == ["triton"] * 3
    assert [kernels.kernel_backend(torch.device("cuda", 1)) for _ in range(2)] == ["triton"] * 2
    assert len(tests) == 1  # one feature test per device type, for the process
    calls = []
    monkeypatch.setattr(kernels, "kernel_backend", lambda device: calls.append(device) or "triton")
    x, slots = torch.randn(5, D_IN), torch.tensor([0, -1, 2, 1, 0])
    for _ in range(3):
        stack.add_(torch.zeros(5, sum(WIDTHS)), x, slots)
    assert calls == [] and stack.add_ == stack.add_dense_  # never asked again per call


def test_a_failed_feature_test_falls_back_to_torch_with_a_warning(fresh_choice, monkeypatch):
    monkeypatch.setattr(kernels, "triton_available", lambda: True)

    def broken(device):
        raise RuntimeError("no compiler for this GPU")

    monkeypatch.setattr(kernels, "feature_test", broken)
    with pytest.warns(UserWarning, match="no compiler for this GPU"):
        assert kernels.kernel_backend("cuda") == "torch"
    monkeypatch.setenv(kernels.BACKEND_VARIABLE, "cuda-graphs")
    with pytest.raises(ValueError, match="'torch' or 'triton'"):
        kernels.kernel_backend("cpu")
    with pytest.raises(ValueError, match="columns"):
        DenseStack(P, 3, R, D_IN, 16, dtype=torch.float32, device=torch.device("cpu"), backend="triton")


def test_the_torch_path_is_bitwise_the_two_dense_gemms():
    generator = torch.Generator().manual_seed(3)
    stack = _stack("torch", generator=generator)
    x, base = torch.randn(7, D_IN, generator=generator), torch.randn(7, sum(WIDTHS), generator=generator)
    slots = torch.tensor([2, -1, 0, 2, 1, -1, 0])
    h = torch.mm(x, stack.a)
    h.view(7, P, -1).mul_(slot_onehot(slots, P)[:, :, None])
    want = base.clone().addmm_(h, stack.b)
    assert torch.equal(stack.add_(base.clone(), x, slots), want)
    assert torch.equal(stack.add_(base.clone(), x, slot_onehot(slots, P)), want)
    bf16, x16 = base.to(torch.bfloat16), x.to(torch.bfloat16)
    h = torch.mm(x16.float(), stack.a)
    h.view(7, P, -1).mul_(slot_onehot(slots, P)[:, :, None])
    assert torch.equal(stack.add_(bf16.clone(), x16, slots), bf16.clone().add_(torch.mm(h, stack.b)))


@pytest.fixture(scope="module")
def interpreted():
    yield from kernels_module("evolora.generation.kernels.lora_triton", "_shrink_kernel")


@pytest.mark.parametrize("reordered", [False, True])
def test_the_triton_stack_adds_the_torch_stacks_delta(interpreted, reordered):
    _, device = interpreted
    order = torch.randint(sum(WIDTHS), (24,), generator=torch.Generator().manual_seed(1)) if reordered else None
    torch_stack, triton_stack = _stack("torch", order), _stack("triton", order)
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(7, D_IN, generator=generator)
    base = torch.randn(7, 24 if reordered else sum(WIDTHS), generator=generator)
    slots = torch.tensor([2, -1, 0, 2, 1, -1, 0])
    want = torch_stack.add_(base.clone(), x, slots)
    move = lambda t: t.to(device)  # noqa: E731
    for rows in (slots, slot_onehot(slots, P)):  # slot ids, or a one-hot turned into them
        got = triton_stack.add_(move(base.clone()), move(x), move(rows)).cpu()
        assert (got - want).abs().max() <= 1e-5
        assert torch.equal(got[slots < 0], base[slots < 0])  # bare rows untouched


@pytest.mark.slow
@pytest.mark.parametrize("model_type, static_prefill", [("llama", False), ("qwen3", False), ("qwen3", True)])
def test_the_graph_engine_with_the_triton_kernels_gives_eager_tokens(
    interpreted, monkeypatch, model_type, static_prefill
):
    """Every sibling group's delta by the routed kernels, the rotary + k/v write, the SiLU·mul and the
    attention (each row between its own bounds: row 1 is left-padded) by their kernels (q/k norms first
    for qwen3), interpreted in fp32: greedy and sampled tokens equal the eager engine's, after the
    eager prefill or the static one (the routed kernels over every prompt position)."""
    from arch_helpers import tiny_decoder

    from evolora.generation.decode import decode
    from evolora.generation.graph import GraphDecoder
    from evolora.generation.routed import BASE, routed
    from evolora.generation.types import Sampling

    if interpreted[1].type != "cpu":
        pytest.skip("the interpreted check runs on the CPU")
    monkeypatch.setenv(kernels.BACKEND_VARIABLE, "triton")
    bank = random_bank(tiny_decoder(model_type), ["A0", "A1"], target_modules=MODULES, b_std=0.3)
    ids = torch.randint(3, 128, (4, 7), generator=torch.Generator().manual_seed(0))
    attention = torch.ones_like(ids)
    attention[1, :3] = 0
    names = ["A0", BASE, "A1", "A0"]
    engine = GraphDecoder(bank, check_every=3, static_prefill=static_prefill)
    w = engine.weights
    assert w.kernels == "triton" and w.fused_rotary and not w.flipped and w.fused_mlp and w.flash_decode
    assert all(g.lora is None or g.lora.backend == "triton" for _, _, groups in w.layers for g in groups)
    greedy = Sampling(max_new_tokens=8, greedy=True)
    sampled = Sampling(max_new_tokens=8, greedy=False, temperature=0.9, top_p=0.95)
    for sampling in (greedy, sampled) if model_type == "llama" else (greedy,):
        options = dict(eos_ids=set(), pad_id=0)
        with torch.no_grad():
            ref = decode(
                bank.model,
                ids,
                attention,
                names,
                sampling,
                generator=torch.Generator().manual_seed(5),
                context=lambda rows: routed(bank, rows),
                **options,
            )
        ours = engine.decode(ids, attention, names, sampling, generator=torch.Generator().manual_seed(5), **options)
        assert torch.equal(ours, ref)
