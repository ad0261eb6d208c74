"""Build the gsm seed slice shipped in the package (``evolora/data/gsm_seeds.json``).

From GSM8K train (MIT license): every problem whose program, rebuilt from the calculator
annotations, is a function of its stated numbers (:func:`evolora.tasks.gsm.seeds.seed_from_program`),
with at most ``--max-steps`` calculations and ``--max-chars`` characters, in file order, up to
``--count`` seeds.

    python benchmarks/gsm_seeds.py /path/to/gsm8k/train.jsonl --count 300
"""

from __future__ import annotations

import argparse
import json

from evolora.tasks.gsm.data import _final_answer, _program_from_calculations, _read_jsonl
from evolora.tasks.gsm.seeds import SEEDS_PATH, seed_from_program


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train")
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--max-steps", type=int, default=2)
    parser.add_argument("--max-chars", type=int, default=220)
    parser.add_argument("--out", default=str(SEEDS_PATH))
    args = parser.parse_args()
    from pathlib import Path

    rows, seeds = _read_jsonl(Path(args.train)), []
    for row in rows:
        program = _program_from_calculations(row["answer"])
        if program is None or len(row["question"]) > args.max_chars or program.count("\n") > args.max_steps:
            continue
        seed = seed_from_program(row["question"], program, _final_answer(row["answer"]))
        if seed is not None:
            seeds.append(
                {
                    "problem": seed.problem,
                    "function": seed.function,
                    "values": [int(v) if v == int(v) else v for v in seed.values],
                }
            )
        if len(seeds) == args.count:
            break
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(
            {"source": "GSM8K train (Cobbe et al. 2021, arXiv 2110.14168), MIT license: GSM8K_LICENSE", "seeds": seeds},
            f,
            indent=0,
        )
    print(f"{len(seeds)} seeds of {len(rows)} train problems -> {args.out}")


if __name__ == "__main__":
    main()
