"""ΔW-space diversity: factor-space distances equal dense references; scale-free population diversity."""

from __future__ import annotations

import doctest

import pytest
import torch

from evolora.operators import delta_distance, delta_norm, diversity, population_diversity

SHAPES = {"q": (12, 10), "down": (7, 16)}  # (d_out, d_in)


def _adapter(generator, rank=3, scale=1.0):
    return {
        m: (
            torch.randn(rank, d_in, generator=generator, dtype=torch.float64),
            scale * torch.randn(d_out, rank, generator=generator, dtype=torch.float64),
        )
        for m, (d_out, d_in) in SHAPES.items()
    }


def test_distances_equal_dense_references():
    g = torch.Generator().manual_seed(0)
    x, y = _adapter(g), _adapter(g)
    dense = lambda a: {m: b @ f for m, (f, b) in a.items()}  # noqa: E731
    dx, dy = dense(x), dense(y)
    reference = sum(torch.linalg.norm(dx[m] - dy[m]) ** 2 for m in SHAPES) ** 0.5
    assert torch.allclose(delta_distance(x, y), reference)
    assert torch.allclose(delta_norm(x), sum(torch.linalg.norm(dx[m]) ** 2 for m in SHAPES) ** 0.5)
    assert float(delta_distance(x, x)) == pytest.approx(0.0, abs=1e-6)


def test_population_diversity_is_scale_free_and_checks_input():
    g = torch.Generator().manual_seed(1)
    adapters = [_adapter(g) for _ in range(3)]
    value = population_diversity(adapters)
    scaled = [{m: (a, 5.0 * b) for m, (a, b) in x.items()} for x in adapters]
    assert population_diversity(scaled) == pytest.approx(value)
    assert 1.0 < value < 1.8  # random, nearly orthogonal ΔW of similar norm: about sqrt(2)
    assert population_diversity([adapters[0], adapters[0]]) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="at least 2"):
        population_diversity(adapters[:1])
    with pytest.raises(ValueError, match="zero"):
        population_diversity([{m: (a, 0 * b) for m, (a, b) in x.items()} for x in adapters[:2]])
    with pytest.raises(ValueError):
        population_diversity([adapters[0], _adapter(g, rank=2)])
    assert doctest.testmod(diversity).failed == 0
