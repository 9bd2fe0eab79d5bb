"""RL update throughput: `python scripts/bench.py train [flags]`.

One jitted RL update (`train.step.make_train_step`: forward, clipped policy
loss with KL and entropy, backward, AdamW) of the "tiny" preset on a
synthetic batch of B rows x L tokens, every token real and trained, at
L = 256, 512 and 1024 (the Sokoban and flights buckets). Each length runs
twice: with the training path's blocked causal attention
(`transformer.causal_attend`, query blocks of `CAUSAL_BLOCK` rows that skip
the masked upper triangle) and with the full LxL form (a block of L rows,
which is the masked `attend` the model used before).

Each row compiles once (timed apart), then runs --repeats updates; the
median is kept. Flags: --rows, --lengths, --repeats, --out (default
experiments/benchmarks/train.json), and --preset / --dtype for another
model (say qwen3-0.6b in bfloat16 on an accelerator; --full_attention=off
skips the full-attention rows).

`--variants=ATTN/REMAT/CHUNK,...` times those forms instead of the
blocked/full pair: ATTN is `full` or a query block (64), REMAT one of
`ModelConfig.remat` ("none" keeps the layers unrolled; "full" and
"dots" scan them), CHUNK the training log-probs' `logits_chunk` (0: whole).
Each row also holds the compiled step's temporary memory. With `--trace`
one more update of each row runs under `jax.profiler.trace`: the row gets
the device's summed op time against the wall time, and its ops grouped by
kind, largest first (`op_time`); `--trace_dir` keeps the raw traces. The
JSON is rewritten after every row, so a run cut off keeps what finished.

`model_tflops` is the update's model FLOPs per second: 6 x (weights a
token multiplies by, the unembedding included) x tokens / seconds, the
usual forward + backward count (attention's own products left out). On
an accelerator the JSON also holds the device's peak memory.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import pathlib
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from agentic_rl import losses, models  # noqa: E402
from agentic_rl.models import transformer  # noqa: E402
from agentic_rl.train import step as step_lib  # noqa: E402
from agentic_rl.train.state import (  # noqa: E402
  OptimizerConfig,
  create_train_state,
)
from agentic_rl.types import TrajectoryBatch  # noqa: E402


def synthetic_inputs(rows: int, length: int, vocab: int):
  """B x L real tokens, one trained turn per row, random advantages."""
  k_tok, k_adv = jax.random.split(jax.random.key(0))
  tokens_BxL = jax.random.randint(k_tok, (rows, length), 0, vocab)
  ones_BxL = jnp.ones((rows, length), jnp.float32)
  batch = TrajectoryBatch(
    tokens_BxL=tokens_BxL,
    loss_mask_BxL=ones_BxL,
    turn_id_BxL=jnp.zeros((rows, length), jnp.int32),
    behaviour_logp_BxL=jnp.full((rows, length), -6.0),
    turn_reward_BxT=jnp.zeros((rows, 1)),
    turn_mask_BxT=jnp.ones((rows, 1)),
    anchor_id_BxT=jnp.arange(rows, dtype=jnp.int32)[:, None],
    process_score_BxT=jnp.zeros((rows, 1)),
    group_id_B=jnp.zeros((rows,), jnp.int32),
    outcome_B=jnp.zeros((rows,)),
  )
  adv_BxL = jnp.broadcast_to(
    jax.random.normal(k_adv, (rows, 1)), (rows, length)
  )
  return step_lib.PolicyInputs(batch, adv_BxL, ref_logp_BxL=-ones_BxL * 6.0)


# The update both benchmarks time: a tiny learning rate, KL and entropy on.
STEP_CONFIG = step_lib.StepConfig(
  optimizer=OptimizerConfig(learning_rate=1e-6),
  loss=losses.PolicyLossConfig(kl_coef=0.1, entropy_coef=1e-3),
)


def timed_updates(step, state, inputs, repeats: int):
  """(state, seconds of each of `repeats` updates) after warm calls."""
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    state, metrics = step(state, inputs)
    jax.block_until_ready(metrics)
    seconds.append(time.perf_counter() - start)
  return state, metrics, seconds


def op_kind(name: str) -> str:
  """An XLA op's name without its instance number: "fusion.12" -> "fusion"."""
  return re.sub(r"[._]\d+$", "", name)


def op_time(events: list, wall_s: float, top: int = 15) -> dict:
  """Device op time of one traced update, grouped by op kind.

  The kernels on the accelerator's streams, if the trace has any, each
  under its XLA op (`hlo_op`) or else its kernel name; on a CPU, the events
  that carry an `hlo_op` (XLA's thunks) on the host threads. A `while`
  op's span, which holds its body's ops, is left out. `busy` is the summed
  op time over the wall time: under 1 on a GPU means it sat idle (launches,
  host work) part of the update.
  """
  names = {
    e["pid"]: e["args"]["name"]
    for e in events
    if e.get("ph") == "M" and e.get("name") == "process_name"
  }
  device_pids = {p for p, n in names.items() if "GPU" in n or "TPU" in n}
  us = collections.Counter()
  count = collections.Counter()
  for e in events:
    args = e.get("args") or {}
    if e.get("ph") != "X":
      continue
    if device_pids:  # kernels on the device's streams, named by op if known
      if e.get("pid") not in device_pids:
        continue
      kind = op_kind(args.get("hlo_op") or e.get("name", "?")[:60])
    elif "hlo_op" in args:
      kind = op_kind(args["hlo_op"])
    else:
      continue
    if kind.startswith("while"):
      continue
    us[kind] += e["dur"]
    count[kind] += 1
  total_s = sum(us.values()) / 1e6
  if not total_s:
    raise RuntimeError("the trace holds no XLA op")
  return {
    "wall_s": wall_s,
    "op_s": total_s,
    "busy": total_s / wall_s,
    "ops": sum(count.values()),
    "top": [
      {"op": k, "s": v / 1e6, "share": v / 1e6 / total_s, "count": count[k]}
      for k, v in us.most_common(top)
    ],
  }


def traced_update(step, state, inputs, keep_dir: str | None, name: str):
  """(state, op_time) of one update under the profiler."""
  with tempfile.TemporaryDirectory() as trace_dir:
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
      start = time.perf_counter()
      state, metrics = step(state, inputs)
      jax.block_until_ready(metrics)
      wall_s = time.perf_counter() - start
    (path,) = pathlib.Path(trace_dir).rglob("perfetto_trace.json.gz")
    if keep_dir:
      pathlib.Path(keep_dir).mkdir(parents=True, exist_ok=True)
      shutil.copy(path, pathlib.Path(keep_dir) / f"trace_{name}.json.gz")
    events = json.loads(gzip.decompress(path.read_bytes()))
  events = events["traceEvents"] if isinstance(events, dict) else events
  return state, op_time(events, wall_s)


def time_update(
  model_config: models.ModelConfig,
  rows: int,
  length: int,
  block: int,
  repeats: int,
  trace: bool = False,
  trace_dir: str | None = None,
) -> dict:
  config = STEP_CONFIG
  state, layout = create_train_state(model_config, config.optimizer)
  inputs = synthetic_inputs(rows, length, model_config.vocab_size)
  start = time.perf_counter()
  saved, transformer.CAUSAL_BLOCK = transformer.CAUSAL_BLOCK, block
  try:  # the block is read when the step is traced, here
    step = step_lib.make_train_step(config, layout)
    compiled = step.jitted.lower(state, inputs).compile()
  finally:
    transformer.CAUSAL_BLOCK = saved
  temp_bytes = compiled.memory_analysis().temp_size_in_bytes
  state, metrics = compiled(state, inputs)
  jax.block_until_ready(metrics)
  compile_s = time.perf_counter() - start
  state, metrics, seconds = timed_updates(compiled, state, inputs, repeats)
  s = statistics.median(seconds)
  flop = 6 * sum(model_config.matmul_weights()) * rows * length
  attention = "full" if block >= length else f"blocked {block}"
  row = {
    "rows": rows,
    "length": length,
    "attention": attention,
    "remat": model_config.remat,
    "logits_chunk": model_config.logits_chunk,
    "first_call_s": compile_s,
    "seconds_per_update": s,
    "seconds_all": seconds,
    "tokens_per_s": rows * length / s,
    "model_tflops": flop / s / 1e12,
    "temp_gib": temp_bytes / 2**30,
    "loss_finite": bool(jnp.isfinite(metrics["loss"])),
  }
  if trace:
    name = (
      f"{rows}x{length}_{attention.replace(' ', '')}_"
      f"{model_config.remat}_{model_config.logits_chunk}"
    )
    state, row["op_time"] = traced_update(
      compiled, state, inputs, trace_dir, name
    )
  return row


def parse_variant(text: str) -> tuple[str, str, int]:
  """An ATTN/REMAT/CHUNK string as a tuple: "full/dots/1024" -> ("full",
  "dots", 1024); ATTN is "full" or a query block size."""
  parts = text.split("/")
  if len(parts) != 3:
    raise ValueError(f"a variant is ATTN/REMAT/CHUNK: {text!r}")
  attn, remat, chunk = parts
  if attn != "full" and not attn.isdigit():
    raise ValueError(f"ATTN must be 'full' or a block size: {text!r}")
  return attn, remat, int(chunk)


def main(argv):
  parser = argparse.ArgumentParser(prog="bench.py train")
  parser.add_argument("--rows", type=int, default=32)
  parser.add_argument("--lengths", default="256,512,1024")
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--out", default="experiments/benchmarks/train.json")
  parser.add_argument("--preset", default="tiny")
  parser.add_argument(
    "--dtype", default="float32", choices=("float32", "bfloat16")
  )
  parser.add_argument(
    "--full_attention",
    default="on",
    choices=("on", "off"),
    help="also time the full LxL attention form (the speedup baseline)",
  )
  parser.add_argument(
    "--variants",
    default="",
    help="ATTN/REMAT/CHUNK,... (say full/dots/1024,64/none/0) instead of "
    "the blocked/full pair",
  )
  parser.add_argument(
    "--trace", action="store_true", help="op time of one traced update"
  )
  parser.add_argument("--trace_dir", default="", help="keep the raw traces")
  args = parser.parse_args(argv)
  variants = [parse_variant(v) for v in args.variants.split(",") if v]
  out = pathlib.Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  meta = {
    "machine": platform.platform(),
    "cpus": os.cpu_count(),
    "jax": jax.__version__,
    "backend": jax.default_backend(),
    "preset": args.preset,
    "dtype": args.dtype,
    "device_kind": jax.devices()[0].device_kind,
    "xla_flags": os.environ.get("XLA_FLAGS", ""),
    "command": "python scripts/bench.py train " + " ".join(argv),
  }

  block = transformer.CAUSAL_BLOCK
  rows = []

  def measure(length, attn, remat, chunk):
    model_config = models.get_preset(
      args.preset,
      dtype=args.dtype,
      param_dtype=args.dtype,
      remat=remat,
      logits_chunk=chunk,
    )
    r = time_update(
      model_config,
      args.rows,
      length,
      length if attn == "full" else int(attn),
      args.repeats,
      args.trace,
      args.trace_dir or None,
    )
    print_row(r)
    rows.append(r)
    write(out, meta, rows)
    return r

  print(f"RL update, {args.preset} ({args.dtype}, {jax.default_backend()})")
  print(
    f"{'B x L':>10} {'attention':>11} {'remat':>5} {'chunk':>5} "
    f"{'first call s':>13} {'s/update':>9} {'tokens/s':>9} {'TFLOP/s':>8} "
    f"{'temp GiB':>8} {'busy':>5}",
    flush=True,
  )
  for length in (int(x) for x in args.lengths.split(",")):
    if variants:
      for attn, remat, chunk in variants:
        measure(length, attn, remat, chunk)
      continue
    if args.full_attention == "on":
      full = measure(length, "full", "none", 0)
    blocked = measure(length, str(block), "none", 0)
    if args.full_attention == "on":
      blocked["speedup_vs_full"] = (
        full["seconds_per_update"] / blocked["seconds_per_update"]
      )
      print(f"blocked vs full: {blocked['speedup_vs_full']:.2f}x")
  write(out, meta, rows)
  if meta.get("peak_bytes_in_use"):
    print(f"peak device memory: {meta['peak_bytes_in_use']} bytes")
  for r in rows:
    if "op_time" in r:
      t = r["op_time"]
      print(
        f"\nop time, {r['rows']} x {r['length']} {r['attention']} "
        f"{r['remat']} chunk {r['logits_chunk']}: {t['op_s']:.3f} s of ops "
        f"in {t['wall_s']:.3f} s ({t['ops']} ops)"
      )
      for o in t["top"]:
        print(
          f"  {o['op']:<40} {o['s']:8.4f} s {o['share']:6.1%} x{o['count']}"
        )
  print(f"wrote {out}")


def print_row(r: dict) -> None:
  busy = r.get("op_time", {}).get("busy")
  print(
    f"{r['rows']:>4} x {r['length']:<4} {r['attention']:>11} "
    f"{r['remat']:>5} {r['logits_chunk']:>5} "
    f"{r['first_call_s']:13.2f} {r['seconds_per_update']:9.3f} "
    f"{r['tokens_per_s']:9.0f} {r['model_tflops']:8.3f} "
    f"{r['temp_gib']:8.2f} " + (f"{busy:5.2f}" if busy else f"{'':>5}"),
    flush=True,
  )


def write(out: pathlib.Path, meta: dict, rows: list) -> None:
  """Rewrite the JSON with the rows so far (and the device's peak memory)."""
  if jax.default_backend() != "cpu":
    stats = jax.devices()[0].memory_stats() or {}
    meta["peak_bytes_in_use"] = stats.get("peak_bytes_in_use")
  out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
