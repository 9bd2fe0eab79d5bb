#!/usr/bin/env bash
# The distillation study: one teacher (configs/sokoban.py:gigpo, seed 0),
# student cold starts x seeds (default 0 1 2; SEEDS="0 1" for fewer), two
# runs at a time, resumable (finished runs are skipped).
# Usage: [SEEDS="0 1"] experiments/distill/run.sh ROOT
#   expert, sequence, token, reverse: the nano student (configs/distill.py)
#   rft: `sequence` into the teacher's own size (tiny), i.e. rejection-
#        sampling fine-tuning from scratch on the teacher's successes
set -euo pipefail
root=${1:-runs/distill}
py=.venv/bin/python
mkdir -p "$root"
if [ ! -f "$root/teacher/summary.json" ]; then
  $py -m agentic_rl.main --config=configs/sokoban.py:gigpo \
      --workdir="$root/teacher" > "$root/teacher.log" 2>&1
fi
for seed in ${SEEDS:-0 1 2}; do
  for source in expert sequence token reverse rft; do
    echo "$source $seed"
  done
done | xargs -P 2 -L 1 bash -c '
  source=$0; seed=$1; out='"$root"'/${source}_seed${seed}
  [ -f "$out/summary.json" ] && exit 0
  args=(--config=configs/distill.py:$source)
  [ "$source" = rft ] && args=(--config=configs/distill.py:sequence
                               --config.model.preset=tiny)
  [ "$source" != expert ] && args+=(--config.distill.teacher='"$root"'/teacher)
  '"$py"' -m agentic_rl.main "${args[@]}" --workdir="$out" \
      --config.seed=$seed "--config.tasks.eval_counts=(256,)" > "$out.log" 2>&1
'
