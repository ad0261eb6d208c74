"""Precision and recall of the gsm grounding rules and the agreement gate on the labelled set.

Reads ``tests/data/gsm_labelled.jsonl`` (proposals labelled consistent or not by reading). For
each rule alone and for the defaults it prints precision (valid proposals that are really
consistent) and recall (consistent proposals kept valid), over all rows and per source. With
``--samples m`` the frozen base model answers every rule-passing proposal m times (student
prompt and sampling of the config) and the agreement gate is scored for each threshold τ.

    python benchmarks/gsm_grounding.py                        # rules only, no model
    python benchmarks/gsm_grounding.py --samples 8 --thresholds 0.125 0.25 0.5
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from evolora.tasks.gsm.grounding import RULES, grounding_reasons

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "gsm_labelled.jsonl"


def score(rows: list[dict], keep: list[bool]) -> dict:
    """Precision and recall of ``keep`` (valid after the gate) against ``rows[i]["consistent"]``."""
    kept = [r for r, k in zip(rows, keep) if k]
    true = sum(r["consistent"] for r in kept)
    consistent = sum(r["consistent"] for r in rows)
    return {
        "valid": len(kept),
        "precision": true / len(kept) if kept else None,
        "recall": true / consistent if consistent else None,
    }


def rule_table(rows: list[dict]) -> dict[str, dict]:
    """{gate name: score} for no rule, each rule alone and all rules (the default)."""
    table = {"sandbox only": score(rows, [True] * len(rows))}
    for rule in RULES:
        table[rule] = score(
            rows, [not grounding_reasons(r["problem"], r["program"], r["answer"], (rule,)) for r in rows]
        )
    table["all rules (default)"] = score(
        rows, [not grounding_reasons(r["problem"], r["program"], r["answer"]) for r in rows]
    )
    return table


def agreement(rows: list[dict], samples: int, config_path: str) -> list[float | None]:
    """The base model's agreement fraction for each rule-passing row (None for the others)."""
    from evolora.bank.local import AdapterBank
    from evolora.config import load_config
    from evolora.generation.rollout import chat_prompt
    from evolora.generation.routed import BASE
    from evolora.model import load_base
    from evolora.tasks import make_task

    config = load_config(config_path)
    task = make_task("gsm", **config.task.params)
    model, tokenizer = load_base(config.model.name, num_threads=config.model.num_threads)
    bank = AdapterBank(model, ["S0"], rank=2, alpha=4, tokenizer=tokenizer)
    passing = [i for i, r in enumerate(rows) if not grounding_reasons(r["problem"], r["program"], r["answer"])]
    prompts = [chat_prompt(tokenizer, task.solve_prompt(rows[i]["problem"])) for i in passing for _ in range(samples)]
    out = bank.rollout(
        prompts,
        [BASE] * len(prompts),
        config.selfplay.sampling("student"),
        batch_size=config.selfplay.generation_batch_size,
    )
    fractions: list[float | None] = [None] * len(rows)
    for k, i in enumerate(passing):
        answers = out[k * samples : (k + 1) * samples]
        fractions[i] = sum(task.grade(a.text, rows[i]["answer"]).label == "correct" for a in answers) / samples
    task.close()
    return fractions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--config", default="tasks/gsm.yaml")
    parser.add_argument("--samples", type=int, default=0)
    parser.add_argument("--thresholds", type=float, nargs="*", default=[0.125, 0.25, 0.5])
    args = parser.parse_args()
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines()]
    for source in [None, *sorted({r["source"] for r in rows})]:
        subset = [r for r in rows if source is None or r["source"] == source]
        print(f"\n{source or 'all rows'}: {len(subset)} proposals, {sum(r['consistent'] for r in subset)} consistent")
        for name, s in rule_table(subset).items():
            p = "-" if s["precision"] is None else f"{s['precision']:.2f}"
            r = "-" if s["recall"] is None else f"{s['recall']:.2f}"
            print(f"  {name:22s} valid {s['valid']:4d}  precision {p:>5s}  recall {r:>5s}")
    if args.samples:
        began = time.perf_counter()
        fractions = agreement(rows, args.samples, args.config)
        print(f"\nagreement of the base model, m = {args.samples} ({time.perf_counter() - began:.0f} s):")
        for row, f in zip(rows, fractions):
            if f is not None:
                print(f"  {f:.3f} {'consistent  ' if row['consistent'] else 'inconsistent'} {row['problem'][:70]!r}")
        for tau in args.thresholds:
            s = score(rows, [f is not None and f >= tau for f in fractions])
            print(
                f"  rules + agreement >= {tau:g}: valid {s['valid']}, precision {s['precision']}, recall {s['recall']}"
            )


if __name__ == "__main__":
    main()
