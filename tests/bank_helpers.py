"""Adapter banks and rated populations with random factors, for tests (not a test module)."""

from __future__ import annotations

import torch

from evolora.bank.local import AdapterBank
from evolora.game import Game
from evolora.population import Population
from evolora.ratings import Ratings


def random_bank(
    model,
    slots: list[str],
    *,
    target_modules,
    b_std: float,
    seed: int = 0,
    rank: int = 4,
    alpha: int = 8,
    tokenizer=None,
    engine: str = "auto",
) -> AdapterBank:
    """An :class:`AdapterBank` over ``model`` (its engine given ``tokenizer``) whose slots get factors
    drawn in slot order from one generator seeded with ``seed`` (B with standard deviation ``b_std``,
    so every ΔW differs)."""
    bank = AdapterBank(
        model, slots, rank=rank, alpha=alpha, target_modules=target_modules, tokenizer=tokenizer, engine=engine
    )
    generator = torch.Generator().manual_seed(seed)
    for slot in bank.slots:
        bank.init_factors(slot, generator, b_std=b_std)
    return bank


def rated_pair(model, teachers: int = 1, tokenizer=None):
    """(bank, teachers, students, ratings) of a rated population of ``teachers`` teachers and one student
    (the bank's engine given ``tokenizer``)."""
    population = Population.initial({"teacher": teachers, "student": 1})
    bank = AdapterBank(
        model, [m.slot for m in population.members], rank=2, alpha=4, target_modules=("q_proj",), tokenizer=tokenizer
    )
    teachers, students = population.players(Game("teacher", "student"))
    ratings = Ratings()
    for member in population.members:
        ratings.add(member.id)
    return bank, teachers, students, ratings
