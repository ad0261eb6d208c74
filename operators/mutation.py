"""Mutations: perturb one adapter into a child of the same rank r and module shapes.

Signature: fn(parent: Adapter, *, generator, **params) -> Adapter. New tensors, parent's dtype.
Modules with identical shapes are processed as one batch (see ``adapter.map_modules``), so the
random stream depends only on the adapter's module order and shapes.

Note: relative noise scales with the parent (‖ΔW‖ or each factor's std), so an all-zero ΔW
(a fresh LoRA with B = 0) stays zero under lowrank_gaussian, spectral and component_mask.

References:
    PopuLoRA, arXiv 2605.16727, §3; EGGROLL (low-rank perturbations), arXiv 2511.16652.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .adapter import Adapter, check_adapter, map_modules, rand, randn_like
from .lowrank import best_rank_r, factors_from_svd, frobenius_inner, svd_factors
from .registry import Param, register

__all__ = ["lowrank_gaussian", "spectral", "layer_gaussian", "component_mask", "gaussian"]

_SIGMA = Param(0.01, low=0.0, high=10.0, doc="noise std in units of each factor's own std")


@register(
    "mutation",
    sigma=Param(0.1, low=0.0, high=10.0, doc="‖noise‖_F / ‖ΔW‖_F before truncation"),
    noise_rank=Param(None, low=1, high=4096, value_type=int, doc="rank q of the noise; None: r"),
)
def lowrank_gaussian(
    parent: Adapter, *, generator: torch.Generator, sigma: float = 0.1, noise_rank: int | None = None
) -> Adapter:
    """Low-rank Gaussian noise on ΔW, refactored back to rank r in factor space.

    N = G Hᵀ with G: (d_out, q), H: (d_in, q) i.i.d. N(0, 1);
    ΔW_child = best rank-r of ΔW + σ ‖ΔW‖_F N / ‖N‖_F   (per module; norms via r×r Grams).
    Truncation keeps, to first order in σ, only the part of the noise tangent to the rank-r
    manifold, so E‖ΔW_child − ΔW‖_F / ‖ΔW‖_F ≈ σ·sqrt(1 − (1 − r/d_out)(1 − r/d_in))
    (≈ 0.17σ for a 576×576 module at r = 8); it is never more than 2σ.

    Shapes:
        parent[name] = (A: (r, d_in), B: (d_out, r)) → same.

    Args:
        sigma: relative noise size in [0, 10] (unitless, vs ‖ΔW‖_F of the module).
        noise_rank: q ≥ 1 (default r).

    Raises:
        ValueError: malformed adapter.

    References:
        EGGROLL, arXiv 2511.16652; PopuLoRA, arXiv 2605.16727, §3.
    """
    rank = check_adapter(parent)
    q = rank if noise_rank is None else noise_rank

    def perturb(pair: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        a, b = pair  # (M, r, d_in), (M, d_out, r)
        g = randn_like(b, generator=generator, shape=(*b.shape[:-1], q))  # (M, d_out, q)
        h = randn_like(a, generator=generator, shape=(*a.shape[:-2], q, a.shape[-1]))  # (M, q, d_in) = Hᵀ
        size = frobenius_inner(a, b, a, b).clamp_min(0).sqrt()
        noise = frobenius_inner(h, g, h, g).clamp_min(0).sqrt().clamp_min(torch.finfo(g.dtype).tiny)
        scale = (sigma * size / noise)[..., None, None]
        out_a, out_b = best_rank_r(
            torch.cat([a.to(g.dtype), h], dim=-2), torch.cat([b.to(g.dtype), scale * g], dim=-1), rank
        )
        return out_a.to(a.dtype), out_b.to(b.dtype)

    return map_modules(perturb, parent)


def _random_rotation(shape: tuple[int, ...], angle: float, like: Tensor, generator: torch.Generator) -> Tensor:
    """exp(K) with K skew-symmetric, scaled so that the largest rotation angle is ``angle`` radians."""
    g = randn_like(like, generator=generator, shape=shape)
    skew = g - g.mT
    norm = torch.linalg.matrix_norm(skew, ord=2).clamp_min(torch.finfo(skew.dtype).tiny)
    return torch.linalg.matrix_exp(skew * (angle / norm)[..., None, None])


@register(
    "mutation",
    epsilon=Param(0.1, low=0.0, high=5.0, doc="std of log singular-value noise"),
    angle=Param(0.05, low=0.0, high=3.1416, doc="largest rotation angle of each singular basis, radians"),
)
def spectral(parent: Adapter, *, generator: torch.Generator, epsilon: float = 0.1, angle: float = 0.05) -> Adapter:
    """SVD spectral perturbation: S ← S ⊙ exp(ε z) and small rotations of both singular bases.

    With ΔW = U diag(S) Vᵀ (factor-space SVD), z ~ N(0, I_r) and K_U, K_V random skew-symmetric r×r
    matrices scaled to spectral norm θ: ΔW_child = (U e^{K_U}) diag(S e^{εz}) (V e^{K_V})ᵀ.
    Rotations act inside the span of the r singular vectors (e^{K} is orthogonal), so U, V stay
    orthonormal; singular values change by a factor e^{εz} (lognormal, median 1).

    Shapes:
        parent[name] = (A: (r, d_in), B: (d_out, r)) → same.

    Args:
        epsilon: std of the log-scale noise on singular values, in [0, 5].
        angle: θ, largest principal rotation angle in radians, in [0, π].

    Raises:
        ValueError: malformed adapter.

    References:
        PopuLoRA, arXiv 2605.16727, §3 ("SVD spectral perturbation").
    """
    rank = check_adapter(parent)

    def perturb(pair: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        u, s, vh = svd_factors(*pair)  # (M, d_out, k), (M, k), (M, k, d_in)
        k = s.shape[-1]
        z = randn_like(s, generator=generator)
        rot_u = _random_rotation((*s.shape[:-1], k, k), angle, s, generator)
        rot_v = _random_rotation((*s.shape[:-1], k, k), angle, s, generator)
        return factors_from_svd(u @ rot_u, s * torch.exp(epsilon * z), rot_v.mT @ vh, rank, dtype=pair[0].dtype)

    return map_modules(perturb, parent)


@register("mutation", fraction=Param(0.25, low=0.0, high=1.0, doc="expected fraction of components zeroed"))
def component_mask(parent: Adapter, *, generator: torch.Generator, fraction: float = 0.25) -> Adapter:
    """Component masking: zero a random subset of each module's singular components.

    Per module, n = ⌊f·k⌋ + Bernoulli(f·k − ⌊f·k⌋) of the k = min(r, d_out, d_in) singular triplets
    are chosen uniformly and their S set to 0 (so E[n] = f·k exactly). ΔW_child = U diag(S ⊙ m) Vᵀ.

    Shapes:
        parent[name] = (A: (r, d_in), B: (d_out, r)) → same; masked components are zero rows of A
        and zero columns of B.

    Args:
        fraction: f in [0, 1].

    Raises:
        ValueError: malformed adapter.

    References:
        PopuLoRA, arXiv 2605.16727, §3 ("component masking").
    """
    rank = check_adapter(parent)

    def mask(pair: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        u, s, vh = svd_factors(*pair)
        k = s.shape[-1]
        expected = fraction * k
        count = int(expected) + (rand(s.shape[:-1], like=s, generator=generator) < expected - int(expected)).long()
        order = rand(s.shape, like=s, generator=generator).argsort(dim=-1).argsort(dim=-1)  # random position of each
        keep = order >= count.unsqueeze(-1)
        return factors_from_svd(u, s * keep, vh, rank, dtype=pair[0].dtype)

    return map_modules(mask, parent)


def _noisy(a: Tensor, b: Tensor, sigma: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """A + σ std(A) N, B + σ std(B) N' with population std per module (broadcasts over a leading axis)."""
    out = []
    for factor in (a, b):
        noise = randn_like(factor, generator=generator)  # float32 or float64
        std = factor.to(noise.dtype).std(dim=(-2, -1), correction=0, keepdim=True)
        out.append((factor.to(noise.dtype) + sigma * std * noise).to(factor.dtype))
    return out[0], out[1]


@register("mutation", sigma=_SIGMA, fraction=Param(0.25, low=0.0, high=1.0, doc="fraction of modules perturbed"))
def layer_gaussian(
    parent: Adapter, *, generator: torch.Generator, sigma: float = 0.01, fraction: float = 0.25
) -> Adapter:
    """Layer-selective Gaussian noise scaled by each tensor's std, on a random fraction of modules.

    n = max(1, round(f·M)) of the M modules (f > 0; none when f = 0) are drawn without replacement;
    for each, A ← A + σ·std(A)·N(0, 1), B ← B + σ·std(B)·N(0, 1). Other modules are copied. A factor
    with std 0 (e.g. B = 0 of a fresh LoRA) is left unchanged.

    Shapes:
        parent[name] = (A: (r, d_in), B: (d_out, r)) → same.

    Args:
        sigma: noise std in units of the tensor's own std, in [0, 10].
        fraction: f in [0, 1], fraction of modules perturbed.

    Raises:
        ValueError: malformed adapter.

    References:
        PopuLoRA, arXiv 2605.16727, §3 ("layer-selective Gaussian noise"); PBT explore, arXiv 1711.09846.
    """
    check_adapter(parent)
    names = list(parent)
    count = 0 if fraction == 0 else max(1, round(fraction * len(names)))
    first = parent[names[0]][0]
    chosen = set(rand((len(names),), like=first, generator=generator).cpu().argsort()[:count].tolist())
    child: Adapter = {}
    for m, name in enumerate(names):
        a, b = parent[name]
        child[name] = _noisy(a, b, sigma, generator) if m in chosen else (a.clone(), b.clone())
    return child


@register("mutation", sigma=_SIGMA)
def gaussian(parent: Adapter, *, generator: torch.Generator, sigma: float = 0.01) -> Adapter:
    """Full-tensor adaptive noise: every factor gets σ·std(factor)·N(0, 1) (per module std).

    Shapes:
        parent[name] = (A: (r, d_in), B: (d_out, r)) → same.

    Args:
        sigma: noise std in units of each factor's own std, in [0, 10].

    Raises:
        ValueError: malformed adapter.

    References:
        PopuLoRA, arXiv 2605.16727, §3 ("full-tensor adaptive noise").
    """
    check_adapter(parent)
    return map_modules(lambda pair: _noisy(*pair, sigma, generator), parent)
