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

`model_tflops` is the update's model FLOPs per second: 6 x (weights a
token multiplies by, the unembedding included) x tokens / seconds, the
usual forward + backward count (attention's own products left out). On
an accelerator the JSON also holds the device's peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
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


def time_update(
  model_config: models.ModelConfig,
  rows: int,
  length: int,
  block: int,
  repeats: int,
) -> dict:
  transformer.CAUSAL_BLOCK = block  # read when the step is traced
  config = STEP_CONFIG
  state, layout = create_train_state(model_config, config.optimizer)
  step = step_lib.make_train_step(config, layout)
  inputs = synthetic_inputs(rows, length, model_config.vocab_size)
  start = time.perf_counter()
  state, metrics = step(state, inputs)
  jax.block_until_ready(metrics)
  compile_s = time.perf_counter() - start
  state, metrics, seconds = timed_updates(step, state, inputs, repeats)
  s = statistics.median(seconds)
  flop = 6 * sum(model_config.matmul_weights()) * rows * length
  return {
    "rows": rows,
    "length": length,
    "attention": "full" if block >= length else f"blocked {block}",
    "first_call_s": compile_s,
    "seconds_per_update": s,
    "seconds_all": seconds,
    "tokens_per_s": rows * length / s,
    "model_tflops": flop / s / 1e12,
    "loss_finite": bool(jnp.isfinite(metrics["loss"])),
  }


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
  args = parser.parse_args(argv)
  model_config = models.get_preset(
    args.preset, dtype=args.dtype, param_dtype=args.dtype
  )

  block = transformer.CAUSAL_BLOCK
  rows = []
  for length in (int(x) for x in args.lengths.split(",")):
    blocked = time_update(model_config, args.rows, length, block, args.repeats)
    if args.full_attention == "on":
      full = time_update(model_config, args.rows, length, length, args.repeats)
      blocked["speedup_vs_full"] = (
        full["seconds_per_update"] / blocked["seconds_per_update"]
      )
      rows.append(full)
    rows.append(blocked)
  transformer.CAUSAL_BLOCK = block

  print(f"RL update, {args.preset} ({args.dtype}, {jax.default_backend()})")
  print(
    f"{'B x L':>10} {'attention':>11} {'first call s':>13} "
    f"{'s/update':>9} {'tokens/s':>9} {'TFLOP/s':>8} {'speedup':>8}"
  )
  for r in rows:
    speedup = r.get("speedup_vs_full")
    print(
      f"{r['rows']:>4} x {r['length']:<4} {r['attention']:>11} "
      f"{r['first_call_s']:13.2f} {r['seconds_per_update']:9.3f} "
      f"{r['tokens_per_s']:9.0f} {r['model_tflops']:8.3f} "
      + (f"{speedup:7.2f}x" if speedup else f"{'':>8}")
    )
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
  }
  if jax.default_backend() != "cpu":
    stats = jax.devices()[0].memory_stats() or {}
    meta["peak_bytes_in_use"] = stats.get("peak_bytes_in_use")
    print(f"peak device memory: {meta['peak_bytes_in_use']} bytes")
  out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
  print(f"wrote {out}")
