#!/usr/bin/env bash
# Offline DPO after SFT on small Sokoban (tiny preset), seeds 0-2 (SEEDS to
# change), two at a time, resumable. Each run logs held-out success before
# DPO (the SFT policy) and after it, on the same 256 levels.
#   ARM=dpo (default): plain DPO;  ARM=rpo: DPO + 1.0 x NLL of the chosen
# Usage: [ARM=rpo] [SEEDS="0 1"] experiments/offline_dpo/run.sh ROOT
set -euo pipefail
root=${1:-runs/offline_dpo}
arm=${ARM:-dpo}
case $arm in
  dpo) extra="--config.offline.sft_coef=0.0" ;;
  rpo) extra="--config.offline.sft_coef=1.0" ;;
  *) echo "ARM must be dpo or rpo, got $arm" >&2; exit 2 ;;
esac
py=.venv/bin/python
mkdir -p "$root"
for seed in ${SEEDS:-0 1 2}; do echo "$seed"; done | xargs -P 2 -L 1 bash -c '
  seed=$0; out='"$root/$arm"'_seed${seed}
  [ -f "$out/summary.json" ] && exit 0
  '"$py"' -m agentic_rl.main --config=configs/sokoban.py:gigpo \
      --workdir="$out" --config.seed=$seed --config.rl.steps=0 \
      --config.offline.dpo_steps=30 --config.offline.num_tasks=512 \
      '"$extra"' "--config.tasks.eval_counts=(256,)" > "$out.log" 2>&1
'
