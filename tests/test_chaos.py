"""Chaos: a tiny run is SIGKILLed at random points, a random file of a random checkpoint is
damaged, and the run is resumed each time; its final records must equal an undisturbed run's.

Each seed draws its own kill points and damage (``random.Random(seed)``), so a failure names
a reproducible schedule.
"""

from __future__ import annotations

import random
import signal
from pathlib import Path

import pytest
from crash_helpers import STEPS, TINY, finish, killed, start, strip

from evolora.checkpoint import FILES, checkpoint_problem
from evolora.io import read_jsonl

pytestmark = pytest.mark.slow  # over ~5 s each: CI runs them, `-m "not slow"` skips them


def _damage(checkpoints: list[Path], rng: random.Random) -> str:
    """Truncate, or overwrite bytes of, one file of one checkpoint; say what was done."""
    target = rng.choice(checkpoints) / rng.choice(FILES)
    data = target.read_bytes()
    if rng.random() < 0.5:
        target.write_bytes(data[: rng.randrange(len(data))])
        how = "truncated"
    else:
        at = rng.randrange(len(data))
        target.write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :])
        how = "flipped a byte of"
    return f"{how} {target}"


@pytest.mark.parametrize("seed", [0, 1])
def test_random_kills_and_a_damaged_checkpoint_still_end_like_an_undisturbed_run(crash_reference, tmp_path, seed):
    rng = random.Random(seed)
    out = tmp_path / "run"
    killed(
        start(
            "tasks/gsm.yaml",
            "--out",
            str(out),
            *TINY,
            kill=(rng.randint(2, STEPS - 1), signal.SIGKILL),
            mid_checkpoint=rng.random() < 0.5,
        )
    )
    checkpoints = sorted((out / "checkpoints").glob("step_*"))
    intact = [p for p in checkpoints if checkpoint_problem(p) is None]
    assert intact, f"seed {seed}: a SIGKILL left no intact checkpoint in {checkpoints}"
    damage = _damage(checkpoints, rng) if len(checkpoints) > 1 else "none"
    # a second kill, after the resumed run's next record at the earliest
    killed(start("--resume", str(out), kill=(rng.randint(1, STEPS - 1), signal.SIGKILL)))
    code, output = finish(start("--resume", str(out)))
    assert code == 0, f"seed {seed}, damage: {damage}\n{output}"
    assert strip(read_jsonl(out / "metrics.jsonl")) == crash_reference["metrics"], damage
    assert read_jsonl(out / "matches.jsonl") == crash_reference["matches"], damage
