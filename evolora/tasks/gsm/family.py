"""The gsm family held-out set: the problems the teachers play with, with numbers no teacher proposed.

    items, excluded = family_items(seeds, simple, simple_fraction=1.0, limit=100, seed=1,
                                   exclude=set(run.memory.answers))

A 135M student solves about 1–3 % of the GSM8K test, so a verdict on it cannot move. The teachers of
the ``numbers`` and ``seeded`` proposal modes vary a fixed set of seed problems
(:mod:`evolora.tasks.gsm.seeds`): the family set draws the same seeds with the same probabilities and
fills each seed's template with new numbers near the seed's (:func:`~evolora.tasks.gsm.proposal_modes.example_call`, whole positive
answers, as GSM8K's are). The truth is the seed's function on those numbers. An item whose text a
teacher proposed validly during the run (``exclude``: :func:`evolora.tasks.base.normalise_problem`
keys of the run's problem memory) is skipped, so the set measures skill on the training family with
numbers never trained on: in-distribution generalisation, not GSM8K transfer.

Source: PopuLoRA (arXiv 2605.16727) §4 (held-out accuracy); GSM-Symbolic templates (arXiv 2410.05229);
the family set is evolora's own.
"""

from __future__ import annotations

import random
from fractions import Fraction

from evolora.tasks.base import HeldOutItem, normalise_problem
from evolora.tasks.gsm.proposal_modes import example_call, fill_template
from evolora.tasks.gsm.seeds import Seed, function_value

TRIES_PER_ITEM = 50
"""Draws per wanted item before :func:`family_items` gives up (exclusions and duplicates are rare)."""


def family_items(
    seeds: list[Seed],
    simple: list[Seed],
    *,
    simple_fraction: float,
    limit: int,
    seed: int,
    exclude: set[str] = frozenset(),
) -> tuple[list[HeldOutItem], int]:
    """Up to ``limit`` distinct family problems, deterministic in ``seed`` and ``exclude``.

    Args:
        seeds: the GSM8K seeds a teacher varies; simple: evolora's simple seeds.
        simple_fraction: probability in [0, 1] that an item's seed is a simple one (the teacher's).
        limit: items wanted (>= 0). seed: the draw's seed (``task.params.eval_seed`` or ``run.seed``).
        exclude: normalised problem texts that must not appear (the run's valid proposals).

    Returns:
        (items, excluded): items with ``group`` "simple" or "gsm8k" and a whole positive answer
        (float); ``excluded``: draws skipped because a teacher had proposed them.

    Raises:
        ValueError: ``limit`` < 0, ``simple_fraction`` outside [0, 1], or no seeds to draw from.
    """
    if limit < 0 or not 0.0 <= simple_fraction <= 1.0:
        raise ValueError(f"family_items needs limit >= 0 and simple_fraction in [0, 1], got {limit}, {simple_fraction}")
    if not seeds and not simple:
        raise ValueError("family_items needs at least one seed")
    rng = random.Random(seed)
    items: list[HeldOutItem] = []
    seen: set[str] = set()
    excluded = 0
    for _ in range(TRIES_PER_ITEM * limit):
        if len(items) == limit:
            break
        use_simple = bool(simple) and (not seeds or rng.random() < simple_fraction)
        chosen = rng.choice(simple if use_simple else seeds)
        item = _item(chosen, rng, "simple" if use_simple else "gsm8k")
        if item is None:
            continue
        key = normalise_problem(item.question)
        if key in exclude:
            excluded += 1
        elif key not in seen:
            seen.add(key)
            items.append(item)
    return items, excluded


def _item(seed: Seed, rng: random.Random, group: str) -> HeldOutItem | None:
    """One problem of ``seed`` on new numbers, or None when its answer is not whole and positive."""
    call = example_call(seed, rng)
    value = function_value(seed.function, call)
    if value is None or value <= 0 or value != int(value):
        return None
    return HeldOutItem(fill_template(seed.template(), [Fraction(str(v)) for v in call]), float(value), group)
