"""Exact low-rank algebra on LoRA factors, without forming the dense ΔW.

For stacked factors B_cat: (d_out, R) and A_cat: (R, d_in) with ΔW = B_cat @ A_cat:

    B_cat = Q_B R_B,  A_catᵀ = Q_A R_A                      (thin QR)
    R_B R_Aᵀ = U_c S V_cᵀ                                   (SVD of a small core, at most R×R)
    ΔW = (Q_B U_c) S (Q_A V_c)ᵀ                             (exact thin SVD of ΔW)
    B' = Q_B U_c[:, :r] √S_r,  A' = √S_r (Q_A V_c[:, :r])ᵀ   (best rank-r refactorisation, Eckart-Young)

Cost O((d_in + d_out)·R²) per module instead of O(d_out·d_in·min(d_out, d_in)) for a dense SVD.
Every function broadcasts over leading batch axes (e.g. a population axis P) and computes in
float32 at least (float64 stays float64); results come back in the input dtype.

References:
    PopuLoRA, arXiv 2605.16727, §3 (factor-space SVD); Eckart & Young, Psychometrika 1936;
    Halko, Martinsson & Tropp, arXiv 0909.4061 (randomized range finder).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

Split = Literal["balanced", "orthonormal_a"]

__all__ = [
    "svd_factors",
    "factors_from_svd",
    "best_rank_r",
    "refactor",
    "weighted_sum_lowrank",
    "dense_refactor",
    "randomized_refactor",
    "frobenius_inner",
]


def _work_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_pair(a: Tensor, b: Tensor) -> None:
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(
            f"expected A: (..., R, d_in) and B: (..., d_out, R), got A {tuple(a.shape)}, B {tuple(b.shape)}"
        )
    if a.shape[-2] != b.shape[-1]:
        raise ValueError(
            f"A has {a.shape[-2]} rows but B has {b.shape[-1]} columns; expected A: (..., R, d_in) and "
            f"B: (..., d_out, R) — did you pass (B, A) instead of (A, B)?"
        )


def _check_rank(rank: int) -> None:
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ValueError(f"rank must be a positive int, got {rank!r}")


def svd_factors(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Thin SVD of ΔW = B @ A computed from the factors (ΔW is never formed).

    ΔW = U diag(S) Vh with orthonormal columns of U, orthonormal rows of Vh, S ≥ 0 descending.

    Shapes:
        a: (..., R, d_in), b: (..., d_out, R) → U: (..., d_out, k), S: (..., k), Vh: (..., k, d_in)
        with k = min(R, d_out, d_in). Components beyond rank(ΔW) have S = 0.

    Args:
        a: stacked A factors (several adapters may be concatenated along R).
        b: stacked B factors, columns matching the rows of ``a``.

    Returns:
        (U, S, Vh) in the working dtype (float32, or float64 for float64 inputs).

    Raises:
        ValueError: mismatched inner dimension R.

    References:
        PopuLoRA, arXiv 2605.16727, §3.
    """
    _check_pair(a, b)
    dtype = _work_dtype(torch.promote_types(a.dtype, b.dtype))
    q_b, r_b = torch.linalg.qr(b.to(dtype))  # (..., d_out, k1), (..., k1, R)
    q_a, r_a = torch.linalg.qr(a.to(dtype).mT)  # (..., d_in, k2), (..., k2, R)
    u_c, s, vh_c = torch.linalg.svd(r_b @ r_a.mT, full_matrices=False)  # core (..., k1, k2)
    return q_b @ u_c, s, vh_c @ q_a.mT


def factors_from_svd(
    u: Tensor, s: Tensor, vh: Tensor, rank: int, *, split: Split = "balanced", dtype: torch.dtype | None = None
) -> tuple[Tensor, Tensor]:
    """Keep the top ``rank`` singular triplets and return LoRA factors (A, B).

    split="balanced": B = U_r √S_r, A = √S_r Vh_r (the paper's choice; ‖A‖ ≈ ‖B‖).
    split="orthonormal_a": B = U_r S_r, A = Vh_r (A has orthonormal rows, like a fresh LoRA whose
    scale lives in B; directions with S = 0 keep a non-zero A, so B can still learn them).
    If fewer than ``rank`` triplets exist (k < rank), the factors are zero-padded to rank.

    Shapes:
        u: (..., d_out, k), s: (..., k), vh: (..., k, d_in) → A: (..., rank, d_in), B: (..., d_out, rank).

    Args:
        rank: output rank r ≥ 1.
        split: how √S is shared between the factors.
        dtype: output dtype (default: that of ``u``).

    Raises:
        ValueError: rank < 1 or unknown split.
    """
    _check_rank(rank)
    if split not in ("balanced", "orthonormal_a"):
        raise ValueError(f"split must be 'balanced' or 'orthonormal_a', got {split!r}")
    k = min(rank, s.shape[-1])
    u, s, vh = u[..., :, :k], s[..., :k].clamp_min(0), vh[..., :k, :]
    if split == "balanced":
        root = s.sqrt()
        b, a = u * root.unsqueeze(-2), root.unsqueeze(-1) * vh
    else:
        b, a = u * s.unsqueeze(-2), vh
    if k < rank:
        a = torch.cat([a, a.new_zeros(*a.shape[:-2], rank - k, a.shape[-1])], dim=-2)
        b = torch.cat([b, b.new_zeros(*b.shape[:-1], rank - k)], dim=-1)
    out = dtype or u.dtype
    return a.to(out), b.to(out)


def best_rank_r(a_cat: Tensor, b_cat: Tensor, rank: int, *, split: Split = "balanced") -> tuple[Tensor, Tensor]:
    """Exact best rank-r refactorisation of ΔW = B_cat @ A_cat, in factor space.

    Returns (A', B') with B' A' = argmin_{rank(X) ≤ r} ‖B_cat A_cat − X‖_F, where
    B' = Q_B U_c √S and A' = √S (Q_A V_c)ᵀ (see module docstring). When rank(ΔW) ≤ r the
    result is exact: B' A' = ΔW up to rounding. A zero ΔW gives zero factors (no NaN).

    Shapes:
        a_cat: (..., R, d_in), b_cat: (..., d_out, R) → A': (..., r, d_in), B': (..., d_out, r).

    Args:
        a_cat: stacked A factors. b_cat: stacked B factors.
        rank: output rank r ≥ 1 (zero-padded when r > min(R, d_out, d_in)).
        split: see :func:`factors_from_svd`.

    Raises:
        ValueError: mismatched R, rank < 1.

    References:
        PopuLoRA, arXiv 2605.16727, §3; Eckart & Young 1936.
    """
    _check_rank(rank)
    u, s, vh = svd_factors(a_cat, b_cat)
    return factors_from_svd(u, s, vh, rank, split=split, dtype=torch.promote_types(a_cat.dtype, b_cat.dtype))


def refactor(a: Tensor, b: Tensor, rank: int | None = None, *, split: Split = "balanced") -> tuple[Tensor, Tensor]:
    """Canonical (SVD-aligned) factors of one adapter module at rank r (default: its own rank).

    Exact (B' A' = B A) when rank(B A) ≤ r; otherwise the best rank-r approximation.

    Shapes:
        a: (..., r0, d_in), b: (..., d_out, r0) → A': (..., r, d_in), B': (..., d_out, r).

    Raises:
        ValueError: see :func:`best_rank_r`.
    """
    _check_pair(a, b)
    return best_rank_r(a, b, a.shape[-2] if rank is None else rank, split=split)


def weighted_sum_lowrank(
    factors: Sequence[tuple[Tensor, Tensor]], weights: Sequence[float] | Tensor, rank: int, *, split: Split = "balanced"
) -> tuple[Tensor, Tensor]:
    """Best rank-r approximation of Σ_i w_i B_i A_i, computed in factor space.

    Stacks [w_1 B_1, …, w_n B_n] and [A_1; …; A_n] (total rank R = Σ r_i) and calls
    :func:`best_rank_r`. Weights may be negative (extrapolation).

    Shapes:
        factors[i] = (A_i: (..., r_i, d_in), B_i: (..., d_out, r_i)); weights: (n,) or (..., n) to
        weight each batch element separately → A': (..., r, d_in), B': (..., d_out, r).

    Args:
        factors: n ≥ 1 modules (A_i, B_i) with the same d_in, d_out.
        weights: n real weights (unitless).
        rank: output rank r ≥ 1.

    Raises:
        ValueError: no factors, weight count ≠ number of factors, or shape mismatch.

    References:
        PopuLoRA, arXiv 2605.16727, §3 (exact factor-space merge, vs PEFT's dense SVD).
    """
    if len(factors) == 0:
        raise ValueError("weighted_sum_lowrank needs at least one (A, B) pair")
    w = torch.as_tensor(
        weights,
        dtype=torch.float64 if factors[0][0].dtype == torch.float64 else torch.float32,
        device=factors[0][0].device,
    )
    if w.shape[-1] != len(factors):
        raise ValueError(f"got {len(factors)} factor pairs but {w.shape[-1]} weights; pass one weight per pair")
    for a, b in factors:
        _check_pair(a, b)
    a_cat = torch.cat([a for a, _ in factors], dim=-2)
    b_cat = torch.cat([b.to(w.dtype) * w[..., i, None, None] for i, (_, b) in enumerate(factors)], dim=-1)
    out_a, out_b = best_rank_r(a_cat, b_cat, rank, split=split)
    dtype = factors[0][0].dtype
    return out_a.to(dtype), out_b.to(dtype)


def dense_refactor(delta: Tensor, rank: int, *, split: Split = "balanced") -> tuple[Tensor, Tensor]:
    """Exact best rank-r factors of a dense ΔW via a full thin SVD (slow; reference/tests).

    Shapes:
        delta: (..., d_out, d_in) → A: (..., r, d_in), B: (..., d_out, r).
    """
    u, s, vh = torch.linalg.svd(delta.to(_work_dtype(delta.dtype)), full_matrices=False)
    return factors_from_svd(u, s, vh, rank, split=split, dtype=delta.dtype)


def randomized_refactor(
    delta: Tensor,
    rank: int,
    *,
    generator: torch.Generator,
    oversample: int = 8,
    power_iters: int = 2,
    split: Split = "balanced",
) -> tuple[Tensor, Tensor]:
    """Near-best rank-r factors of a dense ΔW by a randomized range finder (Halko et al. 2011).

    Y = (ΔW ΔWᵀ)^q ΔW Ω with Gaussian Ω: (d_in, r + oversample), Q = orth(Y), then the SVD of the
    small Qᵀ ΔW. Exact when rank(ΔW) ≤ r + oversample; otherwise the error approaches the optimum
    as power_iters grows. Cost O(d_out·d_in·(r + oversample)·(2q + 2)).

    Shapes:
        delta: (..., d_out, d_in) → A: (..., r, d_in), B: (..., d_out, r).

    Args:
        rank: output rank r ≥ 1.
        generator: source of Ω.
        oversample: extra probe vectors (≥ 0); 8 is plenty for r ≤ 64.
        power_iters: subspace iterations q ≥ 0 (each re-orthonormalised).

    References:
        Halko, Martinsson & Tropp, arXiv 0909.4061, Alg. 4.4.
    """
    _check_rank(rank)
    m = delta.to(_work_dtype(delta.dtype))
    width = min(rank + oversample, m.shape[-1], m.shape[-2])
    omega = torch.randn(
        *m.shape[:-2], m.shape[-1], width, generator=generator, device=generator.device, dtype=m.dtype
    ).to(m.device)
    q, _ = torch.linalg.qr(m @ omega)
    for _ in range(power_iters):
        z, _ = torch.linalg.qr(m.mT @ q)
        q, _ = torch.linalg.qr(m @ z)
    u_small, s, vh = torch.linalg.svd(q.mT @ m, full_matrices=False)
    return factors_from_svd(q @ u_small, s, vh, rank, split=split, dtype=delta.dtype)


def frobenius_inner(a1: Tensor, b1: Tensor, a2: Tensor, b2: Tensor) -> Tensor:
    """⟨B1 A1, B2 A2⟩_F = tr((B1ᵀ B2)(A2 A1ᵀ)) without forming either ΔW.

    Shapes:
        a_i: (..., r_i, d_in), b_i: (..., d_out, r_i) → (...,).
    """
    dtype = _work_dtype(torch.promote_types(a1.dtype, a2.dtype))
    g_b = b1.to(dtype).mT @ b2.to(dtype)  # (..., r1, r2)
    g_a = a2.to(dtype) @ a1.to(dtype).mT  # (..., r2, r1)
    return (g_b * g_a.mT).sum(dim=(-2, -1))
