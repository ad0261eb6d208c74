"""The ``evolora`` command line (typer): the application in :mod:`evolora.cli.app`, the run commands
in :mod:`evolora.cli.execute`, the others beside them.

evolora evolve gsm [--out DIR] [--set a.b=value ...] [--seed N]      # a preset, or a path: tasks/gsm.yaml
evolora init gsm [DEST]                                              # an editable copy of a preset
evolora evolve --resume RUN_DIR [--set run.steps=20]
evolora evolve CONFIG --set 'run.loggers=[jsonl,tensorboard,wandb]'   # trackers: evolora.loggers
evolora operators [--kind mutation]
evolora engines [--import MODULE]                                    # the rollout engines generation.engine names
evolora evaluate RUN_DIR [--limit N]
evolora export RUN_DIR [--member best|ID] [--out DIR] [--merge/--no-merge]   # a member as a HF model or adapter
evolora report RUN_DIR [RUN_DIR ...] [--out DIR]
evolora compare RUN_A RUN_B [...] [--out DIR]
evolora study CONFIG [--seeds 0,1,2] [--arms population,single_agent] [--out DIR] [--set ...]
evolora cache [--clear] [--kind models|held_out]                     # evolora's caches: show, clear
"""

from __future__ import annotations

from evolora.cli.app import app, main

__all__ = ["app", "main"]
