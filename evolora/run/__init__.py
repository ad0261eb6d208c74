"""A PopuLoRA run, step by step (the face of the package: ``from evolora.run import Run, Callback``).

    run = Run(config, "runs/demo")              # evolora.run.run: construction, state, checkpoints
    run.train(callbacks=[...])                  # evolora.run.step: one step; evolora.run.context: its bookkeeping
    summary = run.finish()                      # evolora.run.end: held-out eval, final/ adapters, summary.json

The games of a step are played by the plays of :mod:`evolora.plays` (the shipped ones:
:mod:`evolora.run.plays`).
"""

from __future__ import annotations

from evolora.run.run import Callback, Run

__all__ = ["Callback", "Run"]
