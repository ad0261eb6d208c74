"""Re-run the held-out critic evaluation of finished runs with the current code (verdict scores,
AUC and top-of-n included), reading the students and critics from each run's ``final/``.

    python benchmarks/critic_rescore.py runs/pilot-k4 /path/to/older/run --out runs/rescore.json

Nothing is written into the run directories: one JSON object {run dir: critic_eval} goes to
``--out`` (and a short table to stdout). The evaluation is the run's own
(:func:`evolora.critic.evaluation.critic_evaluation` with its ``eval`` and ``selfplay`` sections and
seed), so the answers, grades and greedy verdicts are those of the run's ``summary.json`` when
the code that produced them is the same. Source: SPC (arXiv 2504.19162); PopuLoRA (arXiv
2605.16727) §4 (the base model as the reference).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from evolora.bank.from_config import bank_from_config
from evolora.config import load_run_config
from evolora.critic.evaluation import critic_evaluation
from evolora.model import load_base
from evolora.tasks import make_task


def rescore(run_dir: Path, model=None, tokenizer=None, task=None) -> dict:
    """The held-out critic evaluation of one finished run (students and critics from ``final/``;
    the base model and the task from its ``config.yaml`` unless given)."""
    config = load_run_config(run_dir)
    summary = json.loads((run_dir / "final" / "summary.json").read_text())
    students = [i["id"] for i in summary["individuals"] if i["role"] == "student"]
    critics = [i["id"] for i in summary["individuals"] if i["role"] == "critic"]
    earlier = summary.get("critic_eval") or {}  # the run's own order: the same sampled answers
    students = [i for i in earlier.get("answerers", students) if i in students]
    critics = [i for i in earlier.get("judges", critics) if i in critics]
    if model is None:
        model, tokenizer = load_base(config.model.name, dtype=config.model.dtype, num_threads=config.model.num_threads)
    slot = _slots(run_dir)
    slots = [slot.get(i, i.upper()) for i in students + critics]
    bank = bank_from_config(model, tokenizer, slots, config)
    for member, name in zip(students + critics, slots):
        bank.load_adapter(name, run_dir / "final" / member)
    task = task or make_task(config.task.name, **config.task.params)
    selfplay, evaluation = config.selfplay, config.eval
    sampling = selfplay.sampling("student")
    result = critic_evaluation(
        bank,
        tokenizer,
        task,
        {slot.get(i, i.upper()): i for i in students},
        {slot.get(i, i.upper()): i for i in critics},
        limit=evaluation.critic_limit,
        n=evaluation.critic_samples,
        sampling=sampling,
        max_new_tokens=evaluation.max_new_tokens,
        critic_max_new_tokens=selfplay.roles["critic"].max_new_tokens,
        batch_size=evaluation.batch_size,
        seed=config.run.seed,
    )
    task.close()
    return result


def _slots(run_dir: Path) -> dict[str, str]:
    """{member id: its bank slot} from the run's last checkpoint (rollouts group rows by slot name,
    so the same names give the same sampled answers); {} without a checkpoint."""
    states = sorted((run_dir / "checkpoints").glob("step_*/state.json"))
    if not states:
        return {}
    return {m["id"]: m["slot"] for m in json.loads(states[-1].read_text())["population"]["members"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {}
    for run_dir in args.runs:
        results[str(run_dir)] = evaluation = rescore(run_dir)
        for judge, row in evaluation["judges"].items():
            print(f"{run_dir} judge {judge}: balanced accuracy {row['balanced_accuracy']}, AUC {row['auc']}")
        for name, row in evaluation["answerers"].items():
            print(
                f"{run_dir} answerer {name}: greedy {row['greedy']:.3f} single {row['single']:.3f} "
                f"majority {row['majority']:.3f} best {row['best_of_n']} top {row['best_of_n_score']}"
            )
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
