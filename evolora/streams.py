"""The random streams of a run: one generator per purpose, each a pure function of (seed, step).

    stream       generator                 draws                                          seed
    proposals    random.Random             prompt examples, proposal requests             "seed:step"
    matchmaking  numpy Generator           PFSP pairs, hall-of-fame meetings, reviews     [seed, step]
    rollout      torch's global RNG        token sampling of every rollout of the step    seed·1 000 003 + step
    repair       torch.Generator (CPU)     culls of members with non-finite factors       seed·7 919 + step
    selection    torch.Generator (CPU)     parent choice at an evolution event            (seed, step, SELECTION)
    variation    torch.Generator (CPU)     crossover coin, crossover, mutation            (seed, step, VARIATION)
    rewards      numpy Generator           the reward controls (evolora.selfplay.reward_control)

No stream draws for another purpose, so two runs of one seed that differ only in the selection
operator (``evolution.selection``) play the same games up to the first evolution event, flip the
same crossover coins and draw the same mutation noise there, and draw the same rollout samples at
every later step: they differ only in which parents were chosen (and what follows from that).
Were selection and variation to share one generator, an operator that consumed more draws would
shift every later coin and every mutation of the step.

Each step builds its streams afresh from (seed, step), so no generator state is checkpointed: a
run resumed at step t draws exactly what the uninterrupted run drew. The evolution streams are CPU
generators on every device (the operators draw on the generator's device and move the draws to
the adapters'), so a run's children are the same on a CPU and a GPU; ``torch.manual_seed`` seeds
the CPU's and every CUDA device's default generator, which the rollouts sample from.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch

SELECTION = 0x5E1E_C7
"""Third word of the seed sequence (seed, step, SELECTION) of the selection stream."""

VARIATION = 0x7A_2A7E
"""Third word of the seed sequence (seed, step, VARIATION) of the variation stream."""


@dataclass(frozen=True)
class StepStreams:
    """The generators of one step (:func:`step_streams`); see the module docstring for what each drives."""

    proposals: random.Random
    matchmaking: np.random.Generator
    repair: torch.Generator
    selection: torch.Generator
    variation: torch.Generator
    rollout_seed: int
    """The seed of the step's rollout sampling (torch's global RNG, in process or on each worker)."""


def rollout_seed(seed: int, step: int) -> int:
    """The seed of one step's rollout sampling (torch's global RNG, in-process or on each worker):
    ``seed · 1 000 003 + step``, modulo 2^64 (what ``torch.manual_seed`` takes), so every run seed
    in [0, 2^63) works and the seeds below 2^43 keep their values.

    >>> rollout_seed(0, 3), rollout_seed(2**63 - 1, 1) < 2**64
    (3, True)
    """
    return (seed * 1_000_003 + step) % 2**64


def stream_seed(seed: int, step: int, stream: int) -> int:
    """A 63-bit seed of stream ``stream`` at (``seed``, ``step``), from numpy's ``SeedSequence``:
    different streams of one step, and one stream at different steps, get unrelated seeds.

    >>> stream_seed(0, 1, SELECTION) == stream_seed(0, 1, SELECTION) != stream_seed(0, 1, VARIATION)
    True
    """
    return int(np.random.SeedSequence([seed, step, stream]).generate_state(1, np.uint64)[0] >> np.uint64(1))


def cpu_generator(seed: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with ``seed``."""
    return torch.Generator(device="cpu").manual_seed(seed)


def step_streams(seed: int, step: int) -> StepStreams:
    """Every stream of step ``step`` of a run with ``run.seed`` ``seed``: a pure function of both.

    Args:
        seed: ``run.seed`` (a non-negative int). step: the step being played, >= 1.
    """
    return StepStreams(
        proposals=random.Random(f"{seed}:{step}"),
        matchmaking=np.random.default_rng([seed, step]),
        repair=cpu_generator((seed * 7_919 + step) % 2**64),
        selection=cpu_generator(stream_seed(seed, step, SELECTION)),
        variation=cpu_generator(stream_seed(seed, step, VARIATION)),
        rollout_seed=rollout_seed(seed, step),
    )
