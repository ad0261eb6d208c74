"""The LoRA adapter genome: type, shape checks, random draws and dense ΔW.

An adapter maps a target-module name to its factors (A, B) with
A: (r, d_in) and B: (d_out, r), so that ΔW = B @ A. The α/r scale is shared by
the whole population, so no operator looks at it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import Tensor

Adapter = dict[str, tuple[Tensor, Tensor]]
"""Target-module name → (A: (r, d_in), B: (d_out, r)); ΔW = B @ A."""

__all__ = [
    "Adapter",
    "check_adapter",
    "check_parents",
    "adapter_rank",
    "delta_weight",
    "clone_adapter",
    "randn_like",
    "rand",
    "better_worse",
    "map_modules",
]


def check_adapter(adapter: Mapping[str, tuple[Tensor, Tensor]], *, what: str = "adapter") -> int:
    """Check one adapter's factor shapes and return its rank r.

    Shapes:
        adapter[name] = (A: (r, d_in), B: (d_out, r)), the same r for every module.

    Args:
        adapter: target-module name → (A, B).
        what: how to name the adapter in error messages.

    Returns:
        The rank r shared by all modules.

    Raises:
        ValueError: empty adapter, factors not 2-D, inner dimensions that disagree, mixed ranks,
            or A and B on different dtypes/devices.
        TypeError: a value that is not a pair of tensors.
    """
    if not adapter:
        raise ValueError(f"{what} has no modules; pass a dict name -> (A: (r, d_in), B: (d_out, r))")
    rank = None
    for name, factors in adapter.items():
        if not (isinstance(factors, (tuple, list)) and len(factors) == 2):
            raise TypeError(f"{what}[{name!r}] must be a pair (A, B) of tensors, got {type(factors).__name__}")
        a, b = factors
        if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
            raise TypeError(f"{what}[{name!r}] must hold torch tensors (A, B)")
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(
                f"{what}[{name!r}]: expected A: (r, d_in) and B: (d_out, r), got A {tuple(a.shape)}, B {tuple(b.shape)}"
            )
        if a.shape[0] != b.shape[1]:
            raise ValueError(
                f"{what}[{name!r}]: A has {a.shape[0]} rows but B has {b.shape[1]} columns; both must equal the "
                f"rank r (A: (r, d_in), B: (d_out, r)); did you pass (B, A) or a transposed factor?"
            )
        if a.dtype != b.dtype or a.device != b.device:
            raise ValueError(
                f"{what}[{name!r}]: A and B must share dtype and device ({a.dtype}/{a.device} vs {b.dtype}/{b.device})"
            )
        if rank is None:
            rank = a.shape[0]
        elif a.shape[0] != rank:
            raise ValueError(
                f"{what}[{name!r}] has rank {a.shape[0]} but other modules have rank {rank}; use one rank per adapter"
            )
    assert rank is not None
    return rank


def check_parents(
    parents: Sequence[Mapping[str, tuple[Tensor, Tensor]]],
    fitness: Sequence[float] | None = None,
    *,
    min_parents: int = 1,
) -> int:
    """Check that parents are compatible (same modules, shapes, rank) and return the rank r.

    Args:
        parents: adapters to combine.
        fitness: one score per parent (higher is better), or None when not needed.
        min_parents: the operator's minimum number of parents.

    Returns:
        The shared rank r.

    Raises:
        ValueError: too few parents, fitness length mismatch or NaN fitness, or module names,
            shapes or ranks that differ between parents (the message names the first difference).
    """
    if len(parents) < min_parents:
        raise ValueError(f"need at least {min_parents} parent(s), got {len(parents)}")
    if fitness is not None:
        if len(fitness) != len(parents):
            raise ValueError(f"got {len(parents)} parents but {len(fitness)} fitness values; pass one per parent")
        if any(f != f for f in (float(x) for x in fitness)):
            raise ValueError("fitness contains NaN; replace it (e.g. by -inf) before selection or crossover")
    rank = check_adapter(parents[0], what="parents[0]")
    names = list(parents[0])
    for i, parent in enumerate(parents[1:], start=1):
        rank_i = check_adapter(parent, what=f"parents[{i}]")
        if set(parent) != set(names):
            missing = sorted(set(names) - set(parent))[:3]
            extra = sorted(set(parent) - set(names))[:3]
            raise ValueError(
                f"parents[{i}] targets different modules than parents[0] (missing {missing}, extra "
                f"{extra}); all parents must adapt the same modules"
            )
        if rank_i != rank:
            raise ValueError(
                f"parents[{i}] has rank {rank_i} but parents[0] has rank {rank}; refactor them to one "
                f"rank first (operators.lowrank.refactor)"
            )
        for name in names:
            (a0, b0), (a, b) = parents[0][name], parent[name]
            if a.shape != a0.shape or b.shape != b0.shape:
                raise ValueError(
                    f"module {name!r}: parents[{i}] has A {tuple(a.shape)}, B {tuple(b.shape)} but "
                    f"parents[0] has A {tuple(a0.shape)}, B {tuple(b0.shape)}"
                )
            if a.dtype != a0.dtype or a.device != a0.device:
                raise ValueError(
                    f"module {name!r}: parents[{i}] is {a.dtype} on {a.device} but parents[0] is "
                    f"{a0.dtype} on {a0.device}; move them to one dtype/device"
                )
    return rank


def adapter_rank(adapter: Mapping[str, tuple[Tensor, Tensor]]) -> int:
    """Rank r of an adapter (rows of A); see :func:`check_adapter`."""
    return check_adapter(adapter)


def delta_weight(a: Tensor, b: Tensor) -> Tensor:
    """Dense ΔW = B @ A for one module (or a stack).

    Shapes:
        a: (..., r, d_in), b: (..., d_out, r) → (..., d_out, d_in).
    """
    return b @ a


def clone_adapter(adapter: Mapping[str, tuple[Tensor, Tensor]]) -> Adapter:
    """Deep copy: new tensors with the same values, dtype and device."""
    return {name: (a.clone(), b.clone()) for name, (a, b) in adapter.items()}


def _draw(fill, shape: Sequence[int], like: Tensor, generator: torch.Generator) -> Tensor:
    """Draw on the generator's device, then move to ``like``'s device and dtype (float32 or wider)."""
    dtype = like.dtype if like.dtype in (torch.float32, torch.float64) else torch.float32
    out = fill(tuple(shape), generator=generator, device=generator.device, dtype=dtype)
    return out.to(device=like.device)


def randn_like(like: Tensor, *, generator: torch.Generator, shape: Sequence[int] | None = None) -> Tensor:
    """Standard normal noise shaped like ``like`` (or ``shape``), drawn from ``generator`` only.

    The draw happens on the generator's device, so a CPU generator gives the same numbers whatever
    device the adapter lives on.
    """
    return _draw(torch.randn, like.shape if shape is None else shape, like, generator)


def rand(shape: Sequence[int], *, like: Tensor, generator: torch.Generator) -> Tensor:
    """Uniform [0, 1) numbers of ``shape`` on ``like``'s device, drawn from ``generator`` only."""
    return _draw(torch.rand, shape, like, generator)


def better_worse(fitness: Sequence[float]) -> tuple[int, int]:
    """Indices of the fittest and least fit parent; ties go to the lowest index.

    Raises:
        ValueError: empty fitness.
    """
    if len(fitness) == 0:
        raise ValueError("fitness is empty")
    values = [float(f) for f in fitness]
    best = max(range(len(values)), key=lambda i: (values[i], -i))
    worst = min(range(len(values)), key=lambda i: (values[i], i))
    return best, worst


def map_modules(
    fn: Callable[..., tuple[Tensor, Tensor]], *adapters: Mapping[str, tuple[Tensor, Tensor]], batched: bool = True
) -> Adapter:
    """Apply a per-module function to aligned adapters and return the resulting adapter.

    With ``batched=True`` modules with identical shapes (e.g. the 30 ``q_proj`` of a model) are
    stacked along a new leading axis M and ``fn`` is called once per shape group, which cuts the
    per-call overhead of small linear-algebra kernels. ``fn`` must therefore broadcast over a
    leading axis. Group order (first appearance in ``adapters[0]``) is deterministic, so random
    draws inside ``fn`` are reproducible.

    Shapes:
        batched: fn((A_1, B_1), ..., (A_n, B_n)) -> (A', B') with A_i: (M, r, d_in),
        B_i: (M, d_out, r), A': (M, r', d_in), B': (M, d_out, r').
        batched=False: the same per module with 2-D factors.
    """
    first = adapters[0]
    if not batched:
        return {name: fn(*[adapter[name] for adapter in adapters]) for name in first}
    groups: dict[tuple, list[str]] = {}
    for name, (a, b) in first.items():
        groups.setdefault((tuple(a.shape), tuple(b.shape), a.dtype, a.device), []).append(name)
    out: dict[str, tuple[Tensor, Tensor]] = {}
    for names in groups.values():
        stacks = [
            (torch.stack([adapter[n][0] for n in names]), torch.stack([adapter[n][1] for n in names]))
            for adapter in adapters
        ]
        new_a, new_b = fn(*stacks)
        for i, n in enumerate(names):
            out[n] = (new_a[i].clone(), new_b[i].clone())  # own storage (safetensors rejects shared)
    return {name: out[name] for name in first}
