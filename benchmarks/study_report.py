"""Write a study's comparison tables (Markdown) and figure from its run directories.

    python benchmarks/study_report.py runs/study-arith --out docs/results/study
"""

from __future__ import annotations

import argparse
from pathlib import Path

from evolora.report.data import load_run
from evolora.report.study_tables import study_figure, study_tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    runs = [load_run(p) for p in sorted(Path(args.study).iterdir()) if (p / "config.yaml").is_file()]
    tables = study_tables(runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables.md").write_text(tables.markdown + "\n")
    study_figure(tables, out / "arms.png")
    print(tables.markdown)


if __name__ == "__main__":
    main()
