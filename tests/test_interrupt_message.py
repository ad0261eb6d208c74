"""The line a stopped run prints names the checkpoint a resume starts from and repeats --no-eval."""

from __future__ import annotations

import pytest

from evolora.cli.execute import interrupted_line


@pytest.mark.parametrize(
    ("checkpoints", "step", "evaluate", "expected"),
    [
        (
            [5],
            8,
            False,
            "interrupted at step 8; a resume restarts from the checkpoint of step 5 (run.checkpoint_every: 5); "
            "continue with: evolora evolve --resume {out} --no-eval",
        ),
        ([5, 10], 10, True, "interrupted at step 10; continue with: evolora evolve --resume {out}"),
        (
            [],
            3,
            True,
            "interrupted at step 3; no checkpoint yet (run.checkpoint_every: 5), a resume starts from step 0; "
            "continue with: evolora evolve --resume {out}",
        ),
    ],
    ids=["steps-to-replay-no-eval", "checkpointed", "no-checkpoint"],
)
def test_interrupted_line(tmp_path, checkpoints, step, evaluate, expected):
    for saved in checkpoints:
        (tmp_path / "checkpoints" / f"step_{saved:06d}").mkdir(parents=True)
    assert interrupted_line(tmp_path, step, 5, evaluate=evaluate) == expected.format(out=tmp_path)
