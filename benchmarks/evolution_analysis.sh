#!/bin/bash
# The analysis of the outer-loop study of docs/results/evolution.md, run once, when all 16 primary
# runs (population and no_evolution, seeds 0-7) have finished; written before any record was read.
# Usage: benchmarks/evolution_analysis.sh STUDY OUT      (from a checkout; OMP_NUM_THREADS=1 for the re-evaluation)
#   1. the primary endpoint and whether selection acted: population - no_evolution, paired by seed
#      (study_report.py: t interval, sign-flip p, item x seed bootstrap, fitness validity, rho(fitness,
#      birth step), the events and the per-event breeder's table; OUT/primary/stats.json unrounded),
#      and its reading by the pre-stated rule (study_reading.py: OUT/primary-reading.md);
#   2. the secondary arm: population - single_agent_total, only once its 8 runs have finished (run
#      the script again then; before, it says how many are in and writes no secondary table);
#   3. post hoc, for comparison: the final adapters of the primary runs re-evaluated on the old
#      270-item grid (9 cells x 30 items, eval_seed 0), resumable (about 9 minutes a run at one thread
#      with SmolLM2-135M on a 2-core CPU), then the same comparison on it; only where all 16 runs keep
#      their final adapters (the records under docs/results/data/ do not: STUDY may be either);
#   4. evolora report over the primary runs (breeding.png, report.json: per run and per study);
#   5. exploratory, stated before any record was read: every selection operator replayed on the
#      population runs' recorded events (selection_replay.py: each operator's expected selection
#      differential on audited held-out and exam accuracy, and the share of events where it is positive).
set -euo pipefail
study=$1; out=$2
mkdir -p "$out"
python benchmarks/study_report.py "$study" --out "$out/primary" \
  --arms population,no_evolution --seeds 0-7 --reference population > "$out/primary.md"
python benchmarks/study_reading.py "$out/primary/stats.json" --comparison "population − no_evolution" \
  --arm population > "$out/primary-reading.md"
secondary=0
for run in "$study"/single_agent_total-s[0-7]; do
  [ -f "$run/final/summary.json" ] && secondary=$((secondary + 1))
done
if [ "$secondary" -eq 8 ]; then
  python benchmarks/study_report.py "$study" --out "$out/secondary" \
    --arms population,single_agent_total --seeds 0-7 --reference population > "$out/secondary.md"
  python benchmarks/study_reading.py "$out/secondary/stats.json" --comparison "population − single_agent_total" \
    --arm population > "$out/secondary-reading.md"
else
  echo "secondary: $secondary of 8 single_agent_total runs finished; not analysed until all 8 are in"
  rm -f "$out/secondary.md" "$out/secondary-reading.md"
fi
kept=0   # the records keep no adapters: the re-evaluation needs the runs' own directories
for run in "$study"/{population,no_evolution}-s[0-7]; do
  compgen -G "$run/final/*/adapter_model.safetensors" > /dev/null && kept=$((kept + 1))
done
if [ "$kept" -eq 16 ]; then
  python benchmarks/study_reevaluate.py "$study" --out "$out/grid270-runs" \
    --set task.params.eval_cells=null --set task.params.eval_per_cell=30 --set task.params.eval_seed=0 \
    --limit 270 --arms population,no_evolution --seeds 0-7
  python benchmarks/study_report.py "$out/grid270-runs" --out "$out/grid270" \
    --arms population,no_evolution --seeds 0-7 --reference population > "$out/grid270.md"
else
  echo "grid270: $kept of 16 primary runs keep their final adapters; not re-evaluated"
  rm -f "$out/grid270.md"
fi
evolora report "$study"/population-s[0-7] "$study"/no_evolution-s[0-7] --out "$out/report" > /dev/null
python benchmarks/selection_replay.py "$study"/population-s[0-7] --json "$out/selection-replay.json" \
  > "$out/selection-replay.md"
echo "reading: $out/primary-reading.md (the pre-stated rule); tables: $out/primary.md, $out/secondary.md (once its 8 runs are in), $out/grid270.md (post hoc), $out/selection-replay.md (exploratory); report: $out/report/"
