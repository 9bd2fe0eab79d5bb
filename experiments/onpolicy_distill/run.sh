#!/usr/bin/env bash
# On-policy distillation: the nano students of experiments/distill (A* SFT,
# `expert`, seeds 0 1 2) continue for 30 steps on their own samples
# (configs/distill.py:expert,<arm>):
#   rl      GiGPO alone
#   opd     the teacher's reverse KL on every sampled token, no reward term
#   opd_rl  GiGPO + the teacher term
#   opd_ep4 opd with 4 epochs over each batch (4x the updates; not run by
#           default: ARMS=opd_ep4)
# Two runs at a time, resumable (finished runs are skipped).
# Usage: [SEEDS="0 1"] [ARMS="opd"] experiments/onpolicy_distill/run.sh \
#          DISTILL_ROOT TEACHER ROOT
#   DISTILL_ROOT  the root experiments/distill/run.sh wrote (expert_seed*)
#   TEACHER       workdir of the finished teacher run (any size)
set -euo pipefail
distill_root=${1:?DISTILL_ROOT}
teacher=${2:?TEACHER}
root=${3:-runs/onpolicy_distill}
py=.venv/bin/python
mkdir -p "$root"
for seed in ${SEEDS:-0 1 2}; do
  for arm in ${ARMS:-rl opd opd_rl}; do
    echo "$arm $seed"
  done
done | xargs -P 2 -L 1 bash -c '
  arm=$0; seed=$1; out='"$root"'/${arm}_seed${seed}
  [ -f "$out/summary.json" ] && exit 0
  args=(--config=configs/distill.py:expert,${arm%_ep4}
        --config.init_from='"$distill_root"'/expert_seed${seed})
  [ "$arm" = opd_ep4 ] && args+=(--config.rl.epochs=4)
  [ "$arm" != rl ] && args+=(--config.rl.teacher='"$teacher"')
  '"$py"' -m agentic_rl.main "${args[@]}" --workdir="$out" \
      --config.seed=$seed "--config.tasks.eval_counts=(256,)" > "$out.log" 2>&1
'
