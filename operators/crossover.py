"""Crossovers: combine parent adapters into one child of the same rank r and module shapes.

Signature: fn(parents: Sequence[Adapter], fitness: Sequence[float], *, generator, **params) -> Adapter.
Fitness: higher is better. Pairwise operators use the fittest parent as "better" and the least
fit as "worse" (ties: lowest index is better). Every child is new tensors in the parents' dtype.

Factor space (exact, O((d_in + d_out)·r²) per module): svd_merge, midpoint, extrapolate, slerp,
svd_splice, layer_swap, clone, dare(space="factors"). Dense ΔW per module (O(d_out·d_in), about
2-3 s per child for SmolLM2-135M on one CPU core), then a randomized rank-r refactorisation:
dare (default space="delta"), ties.

References:
    PopuLoRA, arXiv 2605.16727, §3; DARE (Yu et al.), arXiv 2311.03099; TIES (Yadav et al.),
    arXiv 2306.01708; SLERP (Shoemake, SIGGRAPH 1985); task arithmetic (Ilharco et al.), arXiv 2212.04089.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from .adapter import Adapter, better_worse, check_parents, clone_adapter, map_modules, rand
from .lowrank import factors_from_svd, frobenius_inner, randomized_refactor, svd_factors, weighted_sum_lowrank
from .registry import Param, register

__all__ = [
    "svd_merge",
    "layer_swap",
    "svd_splice",
    "dare",
    "ties",
    "extrapolate",
    "slerp",
    "clone",
    "midpoint",
    "merge_weights",
]

_WEIGHTS = Param("equal", choices=("equal", "fitness"), doc="'equal': w_i = 1/n; 'fitness': softmax(f/temperature)")
_TEMPERATURE = Param(1.0, low=1e-6, high=1e6, doc="softmax temperature, in fitness units")


def merge_weights(fitness: Sequence[float], weights: str = "equal", temperature: float = 1.0) -> list[float]:
    """Merge weights that sum to 1: equal (1/n) or softmax(fitness / temperature).

    Raises:
        ValueError: unknown ``weights`` or temperature ≤ 0.
    """
    if weights == "equal":
        return [1.0 / len(fitness)] * len(fitness)
    if weights != "fitness":
        raise ValueError(f"weights must be 'equal' or 'fitness', got {weights!r}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    values = torch.tensor(
        [float(f) for f in fitness], dtype=torch.float64, device="cpu"
    )  # host arithmetic on P numbers
    return torch.softmax(values / temperature, 0).tolist()


def _merge(parents: Sequence[Adapter], coefficients: Sequence[float], rank: int) -> Adapter:
    """Exact best rank-r approximation of Σ c_i ΔW_i, module by module (batched by shape)."""
    return map_modules(lambda *pairs: weighted_sum_lowrank(pairs, coefficients, rank), *parents)


@register("crossover", weights=_WEIGHTS, temperature=_TEMPERATURE)
def svd_merge(
    parents: Sequence[Adapter],
    fitness: Sequence[float],
    *,
    generator: torch.Generator,
    weights: str = "equal",
    temperature: float = 1.0,
) -> Adapter:
    """Weighted ΔW merge, truncated exactly to rank r in factor space.

    ΔW_child = best rank-r approximation of Σ_i w_i B_i A_i (Eckart-Young), with w from
    :func:`merge_weights`; never forms a dense ΔW. Deterministic (``generator`` unused).

    Shapes:
        ``parents[i][name]`` = (A: (r, d_in), B: (d_out, r)) → ``child[name]`` with the same shapes.

    Args:
        parents: n ≥ 1 compatible adapters. fitness: n scores, higher is better.
        weights: "equal" (w_i = 1/n) or "fitness" (w = softmax(fitness / temperature)).
        temperature: softmax temperature in fitness units, > 0.

    Raises:
        ValueError: incompatible parents (names, shapes, ranks), fitness length, bad weights.

    References:
        PopuLoRA, arXiv 2605.16727, §3 (vs PEFT add_weighted_adapter(combination_type="svd")).
    """
    rank = check_parents(parents, fitness)
    return _merge(parents, merge_weights(fitness, weights, temperature), rank)


@register("crossover")
def midpoint(parents: Sequence[Adapter], fitness: Sequence[float], *, generator: torch.Generator) -> Adapter:
    """Control ``linear_0_5``: the ΔW average (1/n) Σ_i B_i A_i, truncated exactly to rank r.

    Shapes / Raises: as :func:`svd_merge`. Deterministic.

    References:
        PopuLoRA, arXiv 2605.16727, §2 step 7 (control every operator must beat).
    """
    rank = check_parents(parents, fitness)
    return _merge(parents, [1.0 / len(parents)] * len(parents), rank)


@register("crossover")
def clone(parents: Sequence[Adapter], fitness: Sequence[float], *, generator: torch.Generator) -> Adapter:
    """Control ``copy_parent``: an exact copy (new tensors) of the fittest parent (ties: lowest index).

    References:
        PopuLoRA, arXiv 2605.16727, §2 step 7; PBT exploit step, arXiv 1711.09846.
    """
    check_parents(parents, fitness)
    return clone_adapter(parents[better_worse(fitness)[0]])


@register("crossover", p=Param(0.5, low=0.0, high=1.0, doc="probability a module comes from the fitter parent"))
def layer_swap(
    parents: Sequence[Adapter], fitness: Sequence[float], *, generator: torch.Generator, p: float = 0.5
) -> Adapter:
    """Layer-wise selection: each module is copied whole from one parent.

    Module m comes from the fittest parent with probability p, otherwise from a uniformly drawn
    other parent (one draw per module, in the adapter's module order).

    Args:
        p: probability in [0, 1]; with two parents and p = 0.5 this is uniform crossover over modules.

    Raises:
        ValueError: incompatible parents or fewer than 2 parents.

    References:
        PopuLoRA, arXiv 2605.16727, §3 ("layer-wise selection").
    """
    check_parents(parents, fitness, min_parents=2)
    best, _ = better_worse(fitness)
    others = [i for i in range(len(parents)) if i != best]
    names = list(parents[0])
    like = parents[0][names[0]][0]
    draws = rand((len(names), 2), like=like, generator=generator).cpu()
    child: Adapter = {}
    for m, name in enumerate(names):
        source = best if draws[m, 0] < p else others[min(int(draws[m, 1] * len(others)), len(others) - 1)]
        a, b = parents[source][name]
        child[name] = (a.clone(), b.clone())
    return child


@register(
    "crossover",
    k=Param(None, low=0, high=4096, value_type=int, doc="triplets from the fitter parent; None: uniform in 1..r-1"),
)
def svd_splice(
    parents: Sequence[Adapter], fitness: Sequence[float], *, generator: torch.Generator, k: int | None = None
) -> Adapter:
    """SVD-subspace splicing: top-k singular triplets of the better parent, top r−k of the worse.

    ΔW_child = Σ_{j<k} s_j u_j v_jᵀ (better) + Σ_{j<r−k} s'_j u'_j v'_jᵀ (worse), so rank ≤ r.
    The SVDs are computed in factor space. k is drawn once per child (uniform in 1..r−1; 0..1 when
    r = 1) when not given.

    Args:
        k: integer in [0, r]; k = r copies the better parent's ΔW, k = 0 the worse parent's.

    Raises:
        ValueError: incompatible parents, fewer than 2 parents, or k > r.

    References:
        PopuLoRA, arXiv 2605.16727, §3 ("SVD-subspace splicing").
    """
    rank = check_parents(parents, fitness, min_parents=2)
    best, worst = better_worse(fitness)
    if k is None:
        like = next(iter(parents[0].values()))[0]
        low, high = (1, rank - 1) if rank > 1 else (0, 1)
        k = low + min(int(rand((1,), like=like, generator=generator).item() * (high - low + 1)), high - low)
    if not 0 <= k <= rank:
        raise ValueError(f"svd_splice: k={k} must be in [0, r={rank}]")

    def splice(better: tuple[Tensor, Tensor], worse: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        u1, s1, vh1 = svd_factors(*better)
        u2, s2, vh2 = svd_factors(*worse)
        u = torch.cat([u1[..., :k], u2[..., : rank - k]], dim=-1)
        s = torch.cat([s1[..., :k], s2[..., : rank - k]], dim=-1)
        vh = torch.cat([vh1[..., :k, :], vh2[..., : rank - k, :]], dim=-2)
        return factors_from_svd(u, s, vh, rank, dtype=better[0].dtype)

    return map_modules(splice, parents[best], parents[worst])


@register(
    "crossover",
    eta_low=Param(1.0, low=0.0, high=3.0, doc="lower bound of η"),
    eta_high=Param(1.5, low=0.0, high=3.0, doc="upper bound of η"),
)
def extrapolate(
    parents: Sequence[Adapter],
    fitness: Sequence[float],
    *,
    generator: torch.Generator,
    eta_low: float = 1.0,
    eta_high: float = 1.5,
) -> Adapter:
    """Extrapolative combination: ΔW_child = worse + η·(better − worse), η ~ U[eta_low, eta_high].

    Computed as the exact rank-r truncation of (1 − η)·ΔW_worse + η·ΔW_better in factor space;
    one η per child.

    Args:
        eta_low, eta_high: bounds of η with 0 ≤ eta_low ≤ eta_high ≤ 3 (paper: [1, 1.5]).

    Raises:
        ValueError: incompatible parents, fewer than 2 parents, eta_low > eta_high.

    References:
        PopuLoRA, arXiv 2605.16727, §3 ("extrapolative combination").
    """
    rank = check_parents(parents, fitness, min_parents=2)
    if eta_low > eta_high:
        raise ValueError(f"extrapolate: eta_low={eta_low} must be ≤ eta_high={eta_high}")
    best, worst = better_worse(fitness)
    like = next(iter(parents[0].values()))[0]
    eta = eta_low + (eta_high - eta_low) * rand((1,), like=like, generator=generator).item()
    return _merge([parents[worst], parents[best]], [1.0 - eta, eta], rank)


def _slerp_coefficients(cos: Tensor, t: float) -> tuple[Tensor, Tensor]:
    """Shoemake weights (sin((1−t)Ω)/sin Ω, sin(tΩ)/sin Ω); linear (1−t, t) when Ω ≈ 0 or π."""
    omega = torch.arccos(cos.clamp(-1.0, 1.0))
    sin = torch.sin(omega)
    near = sin.abs() < 1e-6
    safe = torch.where(near, torch.ones_like(sin), sin)
    c0 = torch.where(near, torch.full_like(sin, 1 - t), torch.sin((1 - t) * omega) / safe)
    c1 = torch.where(near, torch.full_like(sin, t), torch.sin(t * omega) / safe)
    return c0, c1


@register("crossover", t=Param(0.5, low=0.0, high=1.0, doc="0: worse parent, 1: better parent"))
def slerp(
    parents: Sequence[Adapter], fitness: Sequence[float], *, generator: torch.Generator, t: float = 0.5
) -> Adapter:
    """Spherical interpolation of the flattened ΔW per module, truncated exactly to rank r.

    Ω = arccos(⟨ΔW_0, ΔW_1⟩_F / (‖ΔW_0‖_F ‖ΔW_1‖_F)),
    ΔW_t = sin((1−t)Ω)/sin Ω · ΔW_0 + sin(tΩ)/sin Ω · ΔW_1  (linear when Ω ≈ 0, π or a ΔW is 0),
    with ΔW_0 the worse and ΔW_1 the better parent. Inner products use r×r Gram matrices, so no
    dense ΔW is formed. Deterministic.

    Args:
        t: interpolation fraction in [0, 1].

    Raises:
        ValueError: incompatible parents or fewer than 2 parents.

    References:
        Shoemake, "Animating rotation with quaternion curves", SIGGRAPH 1985; mergekit SLERP.
    """
    rank = check_parents(parents, fitness, min_parents=2)
    best, worst = better_worse(fitness)

    def interpolate(p0: tuple[Tensor, Tensor], p1: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        inner = frobenius_inner(*p0, *p1)
        norm0 = frobenius_inner(*p0, *p0).clamp_min(0).sqrt()
        norm1 = frobenius_inner(*p1, *p1).clamp_min(0).sqrt()
        denom = norm0 * norm1
        cos = torch.where(denom > 0, inner / denom.clamp_min(torch.finfo(denom.dtype).tiny), torch.ones_like(inner))
        c0, c1 = _slerp_coefficients(cos, t)
        return weighted_sum_lowrank([p0, p1], torch.stack([c0, c1], dim=-1), rank)

    return map_modules(interpolate, parents[worst], parents[best])


def _dense_deltas(pairs: Sequence[tuple[Tensor, Tensor]]) -> list[Tensor]:
    """Dense ΔW_i = B_i A_i in float32 or float64, each (..., d_out, d_in), freshly allocated."""
    dtype = torch.float64 if pairs[0][0].dtype == torch.float64 else torch.float32
    return [b.to(dtype) @ a.to(dtype) for a, b in pairs]


@register(
    "crossover",
    p=Param(0.5, low=0.0, high=0.99, doc="drop probability per entry"),
    weights=_WEIGHTS,
    temperature=_TEMPERATURE,
    space=Param("delta", choices=("delta", "factors"), doc="drop entries of ΔW (dense) or of A and B"),
)
def dare(
    parents: Sequence[Adapter],
    fitness: Sequence[float],
    *,
    generator: torch.Generator,
    p: float = 0.5,
    weights: str = "equal",
    temperature: float = 1.0,
    space: str = "delta",
) -> Adapter:
    """DARE: drop entries with probability p, rescale survivors by 1/(1 − p), merge, refactor to rank r.

    space="delta": ΔW_child ≈ best rank-r of Σ_i w_i (M_i ⊙ ΔW_i) / (1 − p) with entrywise
    M_i ~ Bernoulli(1 − p); dense per module (O(d_out·d_in) random draws), rank r by a randomized
    SVD. space="factors": the same drop-and-rescale on the entries of A_i and of B_i (independent
    masks, so E[B̃_i Ã_i] = B_i A_i still), then the exact factor-space merge: much cheaper, larger
    variance per entry, as PEFT's ``dare_linear`` does for LoRA. ``generator`` drives masks and probes.

    Shapes:
        ``parents[i][name]`` = (A: (r, d_in), B: (d_out, r)) → ``child[name]`` with the same shapes.

    Args:
        p: drop probability in [0, 0.99]. weights, temperature: as :func:`svd_merge`.
        space: "delta" or "factors".

    Raises:
        ValueError: incompatible parents, unknown space.

    References:
        Yu et al., "Language Models are Super Mario" (DARE), arXiv 2311.03099.
    """
    rank = check_parents(parents, fitness)
    w = merge_weights(fitness, weights, temperature)
    if space not in ("delta", "factors"):
        raise ValueError(f"dare: space must be 'delta' or 'factors', got {space!r}")

    def drop(x: Tensor) -> Tensor:
        return x * (rand(x.shape, like=x, generator=generator) >= p).to(x.dtype) / (1.0 - p)

    if space == "factors":
        dropped = [{n: (drop(a), drop(b)) for n, (a, b) in parent.items()} for parent in parents]
        return _merge(dropped, w, rank)

    def drop_merge(*pairs: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        merged = None
        for wi, delta in zip(w, _dense_deltas(pairs)):  # delta: (M, d_out, d_in), our own
            delta.masked_fill_(rand(delta.shape, like=delta, generator=generator) < p, 0.0)
            merged = delta.mul_(wi / (1.0 - p)) if merged is None else merged.add_(delta, alpha=wi / (1.0 - p))
        a, b = randomized_refactor(merged, rank, generator=generator)
        return a.to(pairs[0][0].dtype), b.to(pairs[0][0].dtype)

    return map_modules(drop_merge, *parents, batched=False)  # per module: dense temporaries stay in cache


_TIES_SAMPLE = 1 << 16


@register("crossover", density=Param(0.2, low=1e-4, high=1.0, doc="fraction of ΔW entries kept per parent"))
def ties(
    parents: Sequence[Adapter], fitness: Sequence[float], *, generator: torch.Generator, density: float = 0.2
) -> Adapter:
    """TIES merging on ΔW: trim, elect sign, disjoint mean, then refactor to rank r.

    Trim: keep the entries of each ΔW_i whose |·| reaches the (1 − density) quantile of |ΔW_i| (per
    module; the quantile is exact up to 65,536 entries and estimated from 65,536 entries drawn with
    ``generator`` above that, so the kept fraction is density ± ~0.5%).
    Elect: γ = sign(Σ_i trimmed_i). Disjoint mean: average, per entry, the trimmed values whose
    sign equals γ. Rank r by a randomized SVD.

    Args:
        density: kept fraction in (0, 1].

    Raises:
        ValueError: incompatible parents.

    References:
        Yadav et al., "TIES-Merging", arXiv 2306.01708.
    """
    rank = check_parents(parents, fitness)

    def ties_merge(*pairs: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        trimmed = []
        for delta in _dense_deltas(pairs):  # (M, d_out, d_in), our own
            flat = delta.flatten(start_dim=-2)
            if density < 1.0:
                sample = flat
                if flat.shape[-1] > _TIES_SAMPLE:
                    index = (rand((_TIES_SAMPLE,), like=flat, generator=generator) * flat.shape[-1]).long()
                    sample = flat[..., index.clamp_max(flat.shape[-1] - 1)]
                keep = max(1, math.ceil(density * sample.shape[-1]))
                threshold = sample.abs().kthvalue(sample.shape[-1] - keep + 1, dim=-1, keepdim=True).values
                flat.masked_fill_(flat.abs() < threshold, 0.0)
            trimmed.append(delta)
        elected = torch.stack(trimmed).sum(dim=0) if len(trimmed) > 1 else trimmed[0].clone()  # sign(Σ) = γ
        total, count = torch.zeros_like(elected), torch.zeros_like(elected)
        for delta in trimmed:
            agree = (delta * elected) > 0  # non-zero and same sign as γ
            total.add_(delta * agree)
            count.add_(agree)
        a, b = randomized_refactor(total.div_(count.clamp_min_(1.0)), rank, generator=generator)
        return a.to(pairs[0][0].dtype), b.to(pairs[0][0].dtype)

    return map_modules(ties_merge, *parents, batched=False)  # per module: dense temporaries stay in cache
