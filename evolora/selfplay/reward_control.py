"""The reward controls of a study: the learner sees rewards that carry no signal.

    permuted (learner.rewards: permuted, the ``random_reward`` arm):
        for each (role, group) of the step:                   # a student's attempts at one problem,
            rewards ← a random permutation of the same rewards   #   a teacher's proposals of the step
    random (learner.rewards: random, the earlier Gaussian control):
        for each role: drawn = N(mean(real), std(real)) per sample, independently

The permutation keeps every GRPO group's multiset of rewards, so the same groups have a non-zero
advantage and the run trains on the same samples, in number, as with the real rewards: only
which completion earned which reward is lost. The Gaussian draws do not keep it: every group
gets a non-zero spread, and the control trains on far more samples than the real run (about 3x
on arith). Ratings, fitness and the records keep the real outcomes; only what the learner sees
is replaced.

Source: PopuLoRA (arXiv 2605.16727) §4 (population vs baselines, equal compute); the spurious-
reward check of RL-for-reasoning studies; the controls are evolora's own.
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


def randomize_rewards(
    samples: Mapping[str, list[Sample]], roles: Mapping[str, str], generator: np.random.Generator
) -> dict[str, list[Sample]]:
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
        out[member] = [
            dataclasses.replace(s, reward=float(d)) if np.isfinite(s.reward) else s for s, d in zip(batch, draws)
        ]
    return out


def permute_rewards(
    samples: Mapping[str, list[Sample]], roles: Mapping[str, str], generator: np.random.Generator
) -> dict[str, list[Sample]]:
    """Shuffle the rewards within each (role, group): the learner's view of the ``random_reward`` arm.

    Args:
        samples: {individual id: samples} of one step (what the learner would train on).
        roles: {individual id: role}; ids missing from it (hall-of-fame snapshots) keep their samples.
        generator: drives the permutations (see :func:`reward_generator`).

    Returns:
        A new mapping with new samples; the input is not changed. Within each (role,
        :attr:`Sample.group`) the finite rewards are permuted among the group's samples (across
        members when a group spans several); non-finite rewards stay where they are. Each group's
        multiset of rewards, hence its number of non-zero-advantage samples, is unchanged.
    """
    slots: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for member, batch in samples.items():
        if member in roles:
            for index, sample in enumerate(batch):
                if np.isfinite(sample.reward):
                    slots.setdefault((roles[member], sample.group), []).append((member, index))
    out = {member: list(batch) for member, batch in samples.items()}
    for places in slots.values():
        rewards = [samples[m][i].reward for m, i in places]
        for (member, index), j in zip(places, generator.permutation(len(places))):
            out[member][index] = dataclasses.replace(samples[member][index], reward=rewards[int(j)])
    return out
