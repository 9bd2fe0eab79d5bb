#!/bin/bash
# The 0.6B RL update on one GPU, one child process per form (each its own
# peak memory; a form that runs out of memory or time loses only its row):
#   bash scripts/benchmarks/gpu_train_arms.sh OUT_DIR [SECONDS_PER_ARM]
# Forms (ATTN/REMAT/CHUNK, see `bench.py train --variants`): scanned layers
# with chunked logits, the same with whole logits, the unrolled layers the
# earlier H200 run used (full attention), and blocked attention scanned.
# Each row is traced once (op time by kind). Merges the rows into
# OUT_DIR/train_gpu_qwen3-0.6b_bf16.json and keeps the raw traces of the
# first and third forms.
set -u
out=${1:?OUT_DIR}
per_arm=${2:-95}
mkdir -p "$out/traces"
export XLA_FLAGS=${XLA_FLAGS:---xla_gpu_autotune_level=0} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/log.txt"
i=0
for arm in full/dots/1024 full/dots/0 full/none/0 64/dots/1024; do
  i=$((i + 1))
  echo "== arm $i: $arm (limit ${per_arm}s)" | tee -a "$out/log.txt"
  timeout "$per_arm" env PYTHONPATH=. python3 -u scripts/bench.py train \
    --preset=${PRESET:-qwen3-0.6b} --dtype=bfloat16 --rows=${ROWS:-8} --lengths=${LENGTH:-1024} --repeats=3 \
    --variants="$arm" --trace --trace_dir="$out/traces" \
    --out="$out/arm_$i.json" 2>&1 | grep -v "^W0000\|^I0000" | tee -a "$out/log.txt"
  echo "exit ${PIPESTATUS[0]}" | tee -a "$out/log.txt"
done
python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
arms = sorted(out.glob("arm_*.json"))
merged = {"arms": [json.loads(a.read_text()) for a in arms]}
(out / "train_gpu_qwen3-0.6b_bf16.json").write_text(json.dumps(merged, indent=2))
for a in arms:
  a.unlink()
for t in (out / "traces").glob("*.json.gz"):
  if "full_dots_1024" not in t.name and "full_none_0" not in t.name:
    t.unlink()  # at most 8 files come back
for arm in merged["arms"]:
  for r in arm["rows"]:
    t = r.get("op_time", {})
    print(f"{r['attention']:>11} {r['remat']:>5} {r['logits_chunk']:>5} "
          f"{r['seconds_per_update']:7.3f} s {r['model_tflops']:6.1f} TFLOP/s "
          f"first {r['first_call_s']:6.1f} s temp {r['temp_gib']:6.2f} GiB "
          f"peak {(arm['meta'].get('peak_bytes_in_use') or 0) / 2**30:6.2f} GiB "
          f"busy {t.get('busy', 0):.2f}")
    for o in t.get("top", [])[:6]:
      print(f"    {o['op'][:50]:<50} {o['s']:7.3f} s {o['share']:6.1%} x{o['count']}")
PY
