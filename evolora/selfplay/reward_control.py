"""The random-reward control: rewards with the real ones' mean and spread, and no signal.

    for each role:
        real  = every reward the role's members earned this step
        drawn = N(mean(real), std(real)) for each sample, independently    # same size, no signal
        sample.reward ← drawn

A study's ``random_reward`` arm (``learner.rewards: random``) trains on these draws with the same
rollouts, updates and compute as the ``population`` arm, so a gain that survives it does not come
from the verifier's signal (the spurious-reward check of RL-for-reasoning studies). Ratings,
fitness and the records keep the real outcomes; only what the learner sees is replaced.

Source: PopuLoRA (arXiv 2605.16727) §4 (population vs baselines, equal compute); the control is
evolora's own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from evolora.learner import Sample

REWARD_STREAM = 0x5EED_0F_2E
"""Third word of the seed sequence ``(run.seed, step, REWARD_STREAM)`` of the draws, so they never
share a stream with the step's other generators."""


def reward_generator(seed: int, step: int) -> np.random.Generator:
    """The generator of step ``step``'s random rewards: a function of ``(seed, step)`` only, so a
    resumed run draws what the uninterrupted run would have drawn."""
    return np.random.default_rng(np.random.SeedSequence([seed, step, REWARD_STREAM]))


def randomize_rewards(samples: Mapping[str, list[Sample]], roles: Mapping[str, str],
                      generator: np.random.Generator) -> dict[str, list[Sample]]:
    """Replace every reward by an independent Gaussian draw with its role's mean and std this step.

    Args:
        samples: {individual id: samples} of one step (what the learner would train on).
        roles: {individual id: role}; ids missing from it (e.g. hall-of-fame snapshots) keep
            their samples unchanged.
        generator: drives the draws (see :func:`reward_generator`).

    Returns:
        A new mapping with new samples; the input is not changed. A role whose real rewards are
        all equal (std 0) gets that constant, as its real rewards would have given. Non-finite
        real rewards are left out of the mean and std and stay as they are (the learner drops them).
    """
    pooled: dict[str, list[float]] = {}
    for member, batch in samples.items():
        if member in roles:
            pooled.setdefault(roles[member], []).extend(s.reward for s in batch if np.isfinite(s.reward))
    moments = {role: (float(np.mean(r)), float(np.std(r))) for role, r in pooled.items() if r}
    out: dict[str, list[Sample]] = {}
    for member, batch in samples.items():
        role = roles.get(member)
        if role not in moments:
            out[member] = list(batch)
            continue
        mean, std = moments[role]
        draws = generator.normal(mean, std, size=len(batch)) if std > 0 else np.full(len(batch), mean)
        out[member] = [dataclasses.replace(s, reward=float(d)) if np.isfinite(s.reward) else s
                       for s, d in zip(batch, draws)]
    return out
