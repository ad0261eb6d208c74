"""Table-driven tests over every registered crossover, mutation, selection and replacement."""

from __future__ import annotations

import math

import pytest
import torch

from evolora.operators import (
    REGISTRY,
    best_rank_r,
    check_parents,
    frobenius_inner,
    layer_swap,
    lowrank_gaussian,
    midpoint,
    pbt_truncation,
    randomized_refactor,
    refactor,
    svd_factors,
    svd_merge,
    tournament,
    truncation,
    weighted_sum_lowrank,
)

pytestmark = pytest.mark.usefixtures("single_thread")


SHAPES = {"q": (40, 24), "k": (40, 12), "v": (40, 12), "up": (40, 56)}  # name: (d_in, d_out)
RANK = 4
CROSSOVERS = REGISTRY.names("crossover")
MUTATIONS = REGISTRY.names("mutation")
SELECTIONS = REGISTRY.names("selection")
DETERMINISTIC = {"clone", "midpoint", "svd_merge", "slerp"}  # output does not depend on the generator


def make_adapter(seed: int, rank: int = RANK, dtype: torch.dtype = torch.float64, shapes=SHAPES):
    g = torch.Generator().manual_seed(seed)
    return {
        name: (
            torch.randn(rank, d_in, generator=g, dtype=dtype) / d_in**0.5,
            torch.randn(d_out, rank, generator=g, dtype=dtype),
        )
        for name, (d_in, d_out) in shapes.items()
    }


def delta(adapter):
    return {name: b.double() @ a.double() for name, (a, b) in adapter.items()}


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def same(x, y) -> bool:
    return all(torch.equal(x[n][0], y[n][0]) and torch.equal(x[n][1], y[n][1]) for n in x)


def dense_best_rank(matrix: torch.Tensor, rank: int) -> torch.Tensor:
    u, s, vh = torch.linalg.svd(matrix.double(), full_matrices=False)
    return u[:, :rank] * s[:rank] @ vh[:rank]


def rel(x: torch.Tensor, y: torch.Tensor) -> float:
    return ((x - y).norm() / y.norm()).item()


def call_crossover(name, parents, fitness, seed=0):
    return REGISTRY.get("crossover", name).fn(parents, fitness, generator=gen(seed))


def call_mutation(name, parent, seed=0, **params):
    return REGISTRY.get("mutation", name).fn(parent, generator=gen(seed), **params)


def check_child(child, parent):
    assert list(child) == list(parent)
    for name, (a, b) in child.items():
        pa, pb = parent[name]
        assert a.shape == pa.shape and b.shape == pb.shape and a.dtype == pa.dtype and b.dtype == pb.dtype
        assert torch.isfinite(a).all() and torch.isfinite(b).all()
        assert torch.linalg.matrix_rank(b.double() @ a.double()) <= RANK


# ---------- every operator: shapes, dtype, rank, purity, reproducibility ----------


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("name", CROSSOVERS)
def test_crossover_contract(name, dtype):
    parents = [make_adapter(1, dtype=dtype), make_adapter(2, dtype=dtype)]
    before = [{n: (a.clone(), b.clone()) for n, (a, b) in p.items()} for p in parents]
    child = call_crossover(name, parents, [0.2, 0.7])
    check_child(child, parents[0])
    assert all(same(p, q) for p, q in zip(parents, before)), "inputs were modified"
    assert same(child, call_crossover(name, parents, [0.2, 0.7])), "same seed must give the same child"
    if name not in DETERMINISTIC:
        assert not same(child, call_crossover(name, parents, [0.2, 0.7], seed=1)), "seed has no effect"
    for n in child:  # new storage, never aliasing the parents
        assert all(child[n][i].data_ptr() != p[n][i].data_ptr() for p in parents for i in (0, 1))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("name", MUTATIONS)
def test_mutation_contract(name, dtype):
    parent = make_adapter(3, dtype=dtype)
    before = {n: (a.clone(), b.clone()) for n, (a, b) in parent.items()}
    child = call_mutation(name, parent)
    check_child(child, parent)
    assert same(parent, before), "input was modified"
    assert same(child, call_mutation(name, parent))
    assert not same(child, call_mutation(name, parent, seed=1))
    assert not same(child, parent)


@pytest.mark.parametrize("name", CROSSOVERS)
def test_crossover_rejects_mismatched_parents(name):
    other = make_adapter(2)
    other["q"] = (other["q"][0][:, :30], other["q"][1])
    with pytest.raises(ValueError, match="module 'q'"):
        call_crossover(name, [make_adapter(1), other], [0.0, 1.0])
    with pytest.raises(ValueError, match="rank"):
        call_crossover(name, [make_adapter(1), make_adapter(2, rank=RANK + 1)], [0.0, 1.0])
    with pytest.raises(ValueError, match="fitness"):
        call_crossover(name, [make_adapter(1), make_adapter(2)], [0.0])


def test_check_parents_names_the_problem():
    missing = make_adapter(2)
    del missing["v"]
    with pytest.raises(ValueError, match="missing \\['v'\\]"):
        check_parents([make_adapter(1), missing])
    swapped = make_adapter(2)
    swapped["q"] = (swapped["q"][1], swapped["q"][0])
    with pytest.raises(ValueError, match="\\(B, A\\)"):
        check_parents([swapped])


# ---------- factor-space algebra ----------


def test_svd_factors_match_dense_svd():
    a, b = make_adapter(5)["q"]
    u, s, vh = svd_factors(a, b)
    ref = torch.linalg.svdvals(b @ a)
    assert torch.allclose(s, ref[: s.numel()], rtol=1e-10, atol=1e-12)
    assert torch.allclose(u * s @ vh, b @ a, atol=1e-10)


@pytest.mark.parametrize("weights", ["equal", "fitness"])
def test_svd_merge_is_dense_best_rank_r(weights):
    parents = [make_adapter(s, shapes={"m": (40, 24)}) for s in (1, 2, 3)]
    fitness = [0.5, -0.2, 1.3]
    child = svd_merge(parents, fitness, generator=gen(), weights=weights)
    w = [1 / 3] * 3 if weights == "equal" else torch.softmax(torch.tensor(fitness, dtype=torch.float64), 0).tolist()
    target = dense_best_rank(sum(wi * delta(p)["m"] for wi, p in zip(w, parents)), RANK)
    assert rel(delta(child)["m"], target) < 1e-5


def test_svd_merge_float32_accuracy():
    parents = [make_adapter(s, dtype=torch.float32, shapes={"m": (40, 24)}) for s in (1, 2)]
    child = svd_merge(parents, [0, 0], generator=gen())
    target = dense_best_rank(0.5 * (delta(parents[0])["m"] + delta(parents[1])["m"]), RANK)
    assert rel(delta(child)["m"], target) < 1e-5


@pytest.mark.parametrize("true_rank", [1, 3, RANK])
def test_refactor_is_exact_up_to_rank(true_rank):
    a, b = make_adapter(7)["q"]
    a = a.clone()
    a[true_rank:] = 0  # rank-deficient input
    new_a, new_b = refactor(a, b)
    assert new_a.shape == a.shape and new_b.shape == b.shape
    assert torch.allclose(new_b @ new_a, b @ a, atol=1e-10)
    wide_a, wide_b = refactor(a, b, RANK + 3)  # asking for more rank pads with zeros
    assert wide_a.shape == (RANK + 3, a.shape[1]) and torch.allclose(wide_b @ wide_a, b @ a, atol=1e-10)


def test_zero_adapter_gives_zero_without_nan():
    a, b = torch.zeros(RANK, 40), torch.zeros(24, RANK)
    for out_a, out_b in (refactor(a, b), weighted_sum_lowrank([(a, b), (a, b)], [0.5, 0.5], RANK)):
        assert torch.isfinite(out_a).all() and torch.isfinite(out_b).all() and (out_b @ out_a).abs().max() == 0
    zero = {"m": (a, b)}
    for name in MUTATIONS:
        child = call_mutation(name, zero)
        assert all(torch.isfinite(x).all() for pair in child.values() for x in pair), name
    for name in CROSSOVERS:
        child = call_crossover(name, [zero, zero], [0.0, 1.0])
        assert all(torch.isfinite(x).all() for pair in child.values() for x in pair), name


def test_batched_population_axis_equals_per_individual():
    a = torch.randn(5, RANK, 40, generator=gen(1), dtype=torch.float64)
    b = torch.randn(5, 24, RANK, generator=gen(2), dtype=torch.float64)
    out_a, out_b = best_rank_r(a, b, 2)
    for p in range(5):
        ref_a, ref_b = best_rank_r(a[p], b[p], 2)
        assert torch.allclose(out_b[p] @ out_a[p], ref_b @ ref_a, atol=1e-10)


def test_randomized_refactor_near_optimal():
    m = delta(make_adapter(1))["q"] + 0.01 * torch.randn(24, 40, generator=gen(4), dtype=torch.float64)
    a, b = randomized_refactor(m, RANK, generator=gen())
    target = dense_best_rank(m, RANK)
    assert (m - b @ a).norm() <= (m - target).norm() * 1.001


def test_frobenius_inner():
    p, q = make_adapter(1)["up"], make_adapter(2)["up"]
    assert math.isclose(
        frobenius_inner(*p, *q).item(), (delta({"x": p})["x"] * delta({"x": q})["x"]).sum().item(), rel_tol=1e-10
    )


# ---------- controls and specific crossovers ----------


def test_clone_is_exact_copy_of_fitter():
    parents = [make_adapter(1), make_adapter(2)]
    assert same(call_crossover("clone", parents, [0.1, 0.9]), parents[1])
    assert same(call_crossover("clone", parents, [0.5, 0.5]), parents[0])  # tie: lowest index


def test_midpoint_is_half_sum_when_subspaces_are_shared():
    base = make_adapter(1)
    g = gen(9)
    # parent 2 shares A's row space and B's column space: B2 A2 = B M1 · M2 A, so rank(sum) ≤ r
    other = {
        n: (
            torch.randn(RANK, RANK, generator=g, dtype=a.dtype) @ a,
            b @ torch.randn(RANK, RANK, generator=g, dtype=b.dtype),
        )
        for n, (a, b) in base.items()
    }
    child = midpoint([base, other], [0.0, 1.0], generator=gen())
    for n in base:
        assert rel(delta(child)[n], 0.5 * (delta(base)[n] + delta(other)[n])) < 1e-10


def test_extrapolate_and_slerp_extremes():
    worse, better = make_adapter(1), make_adapter(2)
    child = call_crossover_params("extrapolate", [better, worse], [1.0, 0.0], eta_low=1.0, eta_high=1.0)
    assert all(rel(delta(child)[n], delta(better)[n]) < 1e-10 for n in child)
    for t, target in ((0.0, worse), (1.0, better)):
        child = call_crossover_params("slerp", [worse, better], [0.0, 1.0], t=t)
        assert all(rel(delta(child)[n], delta(target)[n]) < 1e-10 for n in child)


def test_slerp_keeps_norm_of_equal_norm_parents():
    p0 = make_adapter(1)
    p1 = make_adapter(2)
    p1 = {n: (a, b * (delta(p0)[n].norm() / delta(p1)[n].norm())) for n, (a, b) in p1.items()}
    mid_lin = {n: 0.5 * (delta(p0)[n] + delta(p1)[n]) for n in p0}
    full = call_crossover_params("slerp", [p0, p1], [0.0, 1.0], t=0.5)
    # slerp stays on the sphere before truncation, so it is larger than the linear midpoint
    assert all(delta(full)[n].norm() > dense_best_rank(mid_lin[n], RANK).norm() for n in p0)


def call_crossover_params(name, parents, fitness, seed=0, **params):
    params = REGISTRY.validate("crossover", name, params)
    return REGISTRY.get("crossover", name).fn(parents, fitness, generator=gen(seed), **params)


def test_svd_splice_takes_top_triplets():
    better, worse = make_adapter(1), make_adapter(2)
    child = call_crossover_params("svd_splice", [worse, better], [0.0, 1.0], k=RANK)
    assert all(rel(delta(child)[n], delta(better)[n]) < 1e-10 for n in child)
    child = call_crossover_params("svd_splice", [worse, better], [0.0, 1.0], k=1)
    for n, (a, b) in better.items():
        u, s, vh = svd_factors(a, b)
        u2, s2, vh2 = svd_factors(*worse[n])
        expected = s[0] * torch.outer(u[:, 0], vh[0]) + u2[:, : RANK - 1] * s2[: RANK - 1] @ vh2[: RANK - 1]
        assert rel(delta(child)[n], expected) < 1e-10
    with pytest.raises(ValueError, match="k=9"):
        call_crossover_params("svd_splice", [worse, better], [0.0, 1.0], k=9)


def test_layer_swap_probability_extremes():
    p0, p1 = make_adapter(1), make_adapter(2)
    assert same(layer_swap([p0, p1], [0.0, 1.0], generator=gen(), p=1.0), p1)
    assert same(layer_swap([p0, p1], [0.0, 1.0], generator=gen(), p=0.0), p0)


def test_dare_without_drop_and_ties_full_density_are_merges():
    parents = [make_adapter(1), make_adapter(2)]
    target = {n: dense_best_rank(0.5 * (delta(parents[0])[n] + delta(parents[1])[n]), RANK) for n in parents[0]}
    child = call_crossover_params("dare", parents, [0.0, 1.0], p=0.0)
    assert all(rel(delta(child)[n], target[n]) < 1e-3 for n in child)
    # TIES with identical parents and density 1 returns the parent
    same_child = call_crossover_params("ties", [parents[0], parents[0]], [0.0, 1.0], density=1.0)
    assert all(rel(delta(same_child)[n], delta(parents[0])[n]) < 1e-8 for n in same_child)


# ---------- mutation strength ----------


@pytest.mark.parametrize("sigma", [0.02, 0.05])
def test_lowrank_gaussian_change_tracks_sigma(sigma):
    """Truncation keeps the noise's tangent part: E rel. change ≈ σ·sqrt(1 − (1 − r/d_out)(1 − r/d_in))."""
    shapes = {f"m{i}": (40, 24) for i in range(16)}
    parent = make_adapter(11, shapes=shapes)
    child = lowrank_gaussian(parent, generator=gen(), sigma=sigma, noise_rank=RANK)
    changes = torch.tensor([rel(delta(child)[n], delta(parent)[n]) for n in parent])
    predicted = sigma * math.sqrt(1 - (1 - RANK / 24) * (1 - RANK / 40))
    assert abs(changes.mean().item() / predicted - 1) < 0.3
    assert (changes <= 2 * sigma).all()


@pytest.mark.parametrize("name", ["gaussian", "layer_gaussian"])
def test_std_scaled_noise_size(name):
    parent = make_adapter(3)
    child = call_mutation(name, parent, sigma=0.1)
    changed = [n for n in parent if not torch.equal(child[n][0], parent[n][0])]
    assert len(changed) == (len(parent) if name == "gaussian" else 1)  # 0.25·4 modules → 1
    for n in changed:
        for i in (0, 1):
            ratio = ((child[n][i] - parent[n][i]).std() / parent[n][i].std()).item()
            assert 0.07 < ratio < 0.13


def test_component_mask_zeroes_components():
    parent = make_adapter(3)
    child = call_mutation("component_mask", parent, fraction=0.5)
    for n, (a, b) in parent.items():
        s_parent = torch.linalg.svdvals(b @ a)[:RANK]
        s_child = torch.linalg.svdvals(child[n][1] @ child[n][0])[:RANK]
        nonzero = s_child[s_child > 1e-8 * s_parent[0]]
        assert nonzero.numel() == RANK // 2
        assert all(torch.isclose(s, s_parent).any() for s in nonzero)  # survivors keep their value


def test_spectral_small_change_for_small_parameters():
    parent = make_adapter(3)
    child = call_mutation("spectral", parent, epsilon=0.01, angle=0.01)
    assert all(0 < rel(delta(child)[n], delta(parent)[n]) < 0.05 for n in parent)


# ---------- selection and replacement ----------


@pytest.mark.parametrize("name", SELECTIONS)
def test_selection_contract(name):
    fn = REGISTRY.get("selection", name).fn
    fitness = torch.tensor([0.3, -1.0, 2.0, 0.3, 0.0, 1.5])
    picks = fn(fitness, 50, generator=gen())
    assert picks.shape == (50,) and picks.dtype == torch.long
    assert ((picks >= 0) & (picks < 6)).all()
    assert torch.equal(picks, fn(fitness, 50, generator=gen()))
    assert not torch.equal(picks, fn(fitness, 50, generator=gen(1)))
    assert fn(fitness, 0, generator=gen()).shape == (0,)
    with pytest.raises(ValueError, match="NaN"):
        fn(torch.tensor([0.0, float("nan")]), 2, generator=gen())


def test_tournament_full_size_returns_best_and_breaks_ties_by_index():
    fitness = torch.tensor([1.0, 3.0, 0.0, 3.0])
    assert (tournament(fitness, 20, generator=gen(), k=4, replace=False) == 1).all()
    assert (tournament(fitness, 20, generator=gen(), k=100, replace=False) == 1).all()
    assert (tournament(fitness, 20, generator=gen(), k=200) == 1).all()  # with replacement: 1 is drawn


@pytest.mark.parametrize(("replace", "p_best"), [(True, 1 - (3 / 4) ** 2), (False, 1 - 3 / 6)])
def test_tournament_with_and_without_replacement_win_rates(replace, p_best):
    """P = 4, k = 2: the best wins 7/16 of tournaments drawn with replacement (DEAP), 1/2 without."""
    picks = tournament(torch.tensor([0.0, 1.0, 2.0, 3.0]), 40_000, generator=gen(), k=2, replace=replace)
    assert abs((picks == 3).double().mean().item() - p_best) < 0.01  # 4 standard errors


def test_truncation_only_from_top():
    fitness = torch.tensor([5.0, 1.0, 4.0, 0.0, 3.0, 2.0])
    picks = truncation(fitness, 200, generator=gen(), fraction=0.5)
    assert set(picks.tolist()) == {0, 2, 4}
    assert set(truncation(torch.zeros(4), 50, generator=gen(), fraction=0.5).tolist()) == {0, 1}  # ties by index


def test_rank_selection_pressure_and_ties():
    fitness = torch.tensor([3.0, 1.0, 1.0, 0.0])
    picks = REGISTRY.get("selection", "rank").fn(fitness, 4000, generator=gen(), pressure=2.0)
    counts = torch.bincount(picks, minlength=4)
    assert counts[3] == 0 and counts[0] > counts[1]
    assert abs(counts[1].item() - counts[2].item()) < 200  # tied individuals equally likely


def test_fitness_proportional_temperature():
    fitness = torch.tensor([0.0, 10.0, float("-inf")])
    picks = REGISTRY.get("selection", "fitness_proportional").fn(fitness, 100, generator=gen(), temperature=0.1)
    assert (picks == 1).all()


@pytest.mark.parametrize(
    "size,gamma,elitism,count",
    [(8, 0.25, 1, 2), (8, 0.1, 1, 1), (4, 1.0, 2, 2), (5, 0.0, 0, 0), (1, 0.5, 0, 0), (8, 0.75, 0, 6)],
)
def test_pbt_truncation(size, gamma, elitism, count):
    fitness = torch.randperm(size, generator=gen(size)).double()
    replace, parents = pbt_truncation(fitness, generator=gen(), gamma=gamma, elitism=elitism)
    assert replace.shape == parents.shape == (count,)
    order = torch.argsort(fitness, descending=True)
    assert set(replace.tolist()) == set(order[size - count :].tolist())  # exactly the bottom
    assert not set(replace.tolist()) & set(order[: max(elitism, 1)].tolist())  # never the elite
    assert not set(parents.tolist()) & set(replace.tolist())  # parents survive
    if count:
        assert set(parents.tolist()) <= set(order[: math.ceil(gamma * size)].tolist())


def test_pbt_truncation_ties_by_index():
    replace, _ = pbt_truncation(torch.zeros(4), generator=gen(), gamma=0.5, elitism=1)
    assert replace.tolist() == [3, 2]


def test_dare_factor_space():
    parents = [make_adapter(1), make_adapter(2)]
    exact = svd_merge(parents, [0.0, 1.0], generator=gen())
    no_drop = call_crossover_params("dare", parents, [0.0, 1.0], p=0.0, space="factors")
    assert all(rel(delta(no_drop)[n], delta(exact)[n]) < 1e-10 for n in exact)
    child = call_crossover_params("dare", parents, [0.0, 1.0], p=0.3, space="factors")
    check_child(child, parents[0])
    assert same(child, call_crossover_params("dare", parents, [0.0, 1.0], p=0.3, space="factors"))


def test_ties_trims_to_density():
    big = {"m": (40, 24)}
    parents = [make_adapter(1, shapes=big), make_adapter(1, shapes=big)]  # identical: sign election is a no-op
    child = call_crossover_params("ties", parents, [0.0, 1.0], density=0.25)
    kept = delta(parents[0])["m"]
    threshold = kept.abs().flatten().kthvalue(kept.numel() - math.ceil(0.25 * kept.numel()) + 1).values
    trimmed = kept * (kept.abs() >= threshold)
    assert rel(delta(child)["m"], dense_best_rank(trimmed, RANK)) < 1e-2  # randomized SVD of a full-rank matrix
