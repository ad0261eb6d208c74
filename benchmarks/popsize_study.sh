#!/bin/bash
# The population-size study of docs/results/population-size.md, one seed per call (arms in order
# population (2+2), size1 (1+1), size4 (4+4): the same 8 problems x 8 samples per step in each).
# Usage: benchmarks/popsize_study.sh SEED OUT VALIDITY_JSON [ARMS]   (run from a checkout; OMP_NUM_THREADS=1)
# ARMS (default population,size1,size4) also takes the later stages' arms, with the same settings:
# size4_noevo (4+4, evolution off) for evolution on - off, random_reward and single_agent_total
# (the population's 8 problems per step) for the controls. Finished runs are skipped.
# The fitness is chosen once, by the pre-stated rule, and kept in OUT/fitness-choice:
# validation (dev accuracy, 36 items) when its within-run rank correlation with held-out accuracy
# (VALIDITY_JSON from benchmarks/fitness_validity.py --size 36) exceeds that of mu - 3 sigma; else rating.
set -euo pipefail
seed=$1; out=$2; validity=$3; arms=${4:-population,size1,size4}
mkdir -p "$out"
if [ ! -s "$out/fitness-choice" ]; then
  python - "$validity" > "$out/fitness-choice" <<'PY'
import json, sys
pooled = json.load(open(sys.argv[1]))["pooled"]
dev, rating = pooled["dev"]["rho"], pooled["rating"]["rho"]
print("validation" if dev is not None and (rating is None or dev > rating) else "rating")
PY
fi
fitness=$(cat "$out/fitness-choice")
evolora study tasks/arith.yaml --arms "$arms" --seeds "$seed" --out "$out" \
  --set model.num_threads=1 --set model.dtype=float32 \
  --set task.params.eval_per_cell=30 --set eval.limit=270 \
  --set "evolution.fitness={\"name\": \"$fitness\", \"size\": 36}" \
  --set 'study.arms.size1={"population.teachers": 1, "population.students": 1, "selfplay.proposals_per_teacher": 8, "evolution.enabled": false, "evolution.elitism": 0, "evolution.crossover_rate": 0}' \
  --set 'study.arms.size4={"population.teachers": 4, "population.students": 4, "selfplay.proposals_per_teacher": 2}' \
  --set 'study.arms.size4_noevo={"population.teachers": 4, "population.students": 4, "selfplay.proposals_per_teacher": 2, "evolution.enabled": false}'
