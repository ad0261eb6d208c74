"""Exact parent chances of the built-in selections against the operators' own draws."""

from __future__ import annotations

import math

import pytest
import torch

from evolora.operators import REGISTRY, selection_chances

FITNESS = torch.tensor([0.3, 0.9, 0.3, -0.2, 0.6, 0.6], dtype=torch.float64)  # ties at 0.3 and 0.6


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("tournament", {}),
        ("tournament", {"k": 2, "replace": False}),
        ("truncation", {"fraction": 0.4}),
        ("rank", {"pressure": 1.8}),
        ("fitness_proportional", {"temperature": 0.3}),
    ],
)
def test_exact_chances_match_the_operators_draws(name, params):
    chances = selection_chances(name, FITNESS, params)
    assert chances.sum().item() == pytest.approx(1.0)
    draws = 40_000
    spec = REGISTRY.get("selection", name)
    picked = spec.fn(
        FITNESS, draws, generator=torch.Generator().manual_seed(3), **REGISTRY.validate("selection", name, params)
    )
    counts = torch.bincount(picked, minlength=FITNESS.numel()).tolist()
    for count, p in zip(counts, chances.tolist()):
        assert abs(count - draws * p) <= 4 * math.sqrt(draws * p * (1 - p)) + 1, (name, counts, chances)


def test_closed_forms_by_hand():
    f = torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)
    # k = 2 with replacement: the worst wins only against itself, (1/3)^2
    assert selection_chances("tournament", f, {"k": 2}).tolist() == pytest.approx([1 / 9, 3 / 9, 5 / 9])
    assert selection_chances("truncation", f, {"fraction": 0.5}).tolist() == [0.0, 0.5, 0.5]
    assert selection_chances("rank", f, {"pressure": 2.0}).tolist() == pytest.approx([0.0, 1 / 3, 2 / 3])
    assert selection_chances("my_pkg.ops:mine", f) is None  # no closed form for a user's operator
