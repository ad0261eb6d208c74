#!/bin/bash
# The outer-loop study of docs/results/evolution.md, one seed per call; OMP_NUM_THREADS=1, from a checkout.
# Usage: benchmarks/evolution_study.sh SEED OUT [ARMS] [STEPS]
#   ARMS default population,no_evolution (evolution on, off); the secondary arm is single_agent_total;
#   lexicase is the population arm with students' parents by lexicase (docs/results/lexicase.md).
#   Calibration (seeds outside the study, 25 steps, every event audited on the held-out set):
#   benchmarks/evolution_study.sh 100 runs/exam-calibration population 25
# Settings: 4 + 4 on arith, 8 problems x 8 answers per step, evolution every 5 steps (9 events in 50
# steps), half of each role replaced per event, the exam fitness (64 recent teacher problems + 64 dev
# problems), inherited child ratings, held-out: 272 items of the 4 cells where members differ.
# The exam's score comes from OUT/score (written once by benchmarks/exam_choice.py: the pre-stated
# rule); without that file (the calibration) it is accuracy.
set -euo pipefail
seed=$1; out=$2; arms=${3:-population,no_evolution}; steps=${4:-50}
mkdir -p "$out"
score=accuracy; [ -s "$out/score" ] && score=$(cat "$out/score")
audit=68; [ "$steps" = 25 ] && audit=272   # held-out items audited at every event (never used to select)
evolora study tasks/arith.yaml --arms "$arms" --seeds "$seed" --out "$out" \
  --set model.num_threads=1 --set model.dtype=float32 --set run.steps="$steps" \
  --set population.teachers=4 --set population.students=4 --set selfplay.proposals_per_teacher=2 \
  --set evolution.every=5 --set evolution.gamma=0.5 --set evolution.elitism=1 \
  --set evolution.child_rating=inherit --set evolution.audit="$audit" \
  --set "evolution.fitness={\"name\": \"exam\", \"problems\": 64, \"size\": 64, \"score\": \"$score\"}" \
  --set 'task.params.eval_cells=["d1o1", "d1o2", "d1o3", "d2o1"]' --set task.params.eval_per_cell=68 \
  --set task.params.eval_seed=1 --set eval.limit=272 \
  --set 'study.arms={"lexicase": {"evolution.roles": {"student": {"selection": {"name": "lexicase"}}}}}'
