"""Activation memory of the RL update with and without remat and chunks.

  python scripts/bench.py remat [--preset=tiny --rows=8 --lengths=512,1024
                                 --logits_chunks=0]

The real jitted RL update (`train.step.make_train_step`: forward, clipped
policy loss with KL and entropy, backward, AdamW) on a synthetic batch of
B rows x L real tokens, once per `ModelConfig.remat` mode ("none", "full",
"dots"; see `transformer.scan_blocks`) and per `ModelConfig.logits_chunk`
in --logits_chunks (0: the whole [B, L, V] logits at once; see
`losses.chunked_token_logp`), from the same initial state. Per row: the
compiled step's temporary memory (`memory_analysis().temp_size_in_bytes`:
activations and everything else the step allocates besides its arguments
and outputs), compile seconds, the median seconds of --repeats updates,
and the first update's loss and gradient norm against
those of the first variant ("none" at the first of --logits_chunks), which
neither remat nor chunks may change beyond float summation order.

With --compile_only the step is compiled from shapes alone
(`abstract_train_state`, nothing allocated) and only its memory is
reported, so a real-size preset fits a small machine:
`--preset=qwen3-0.6b --rows=1 --lengths=2048 --compile_only`. With
`--mesh=data,fsdp,tensor` (and that many devices, simulated on a CPU with
XLA_FLAGS=--xla_force_host_platform_device_count=N) the state and batch
are split by the training rules and the memory is per device; `--remats`
picks a subset of the modes.
Prints a table and writes JSON (default experiments/benchmarks/remat.json).
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

from agentic_rl import models  # noqa: E402
from agentic_rl import sharding as shd  # noqa: E402
from agentic_rl.models.config import REMAT  # noqa: E402
from agentic_rl.train import step as step_lib  # noqa: E402
from agentic_rl.train.state import (  # noqa: E402
  abstract_train_state,
  create_train_state,
  make_layout,
)
from benchmarks.train import (  # noqa: E402
  STEP_CONFIG,
  synthetic_inputs,
  timed_updates,
)

MiB = 2**20


def measure(
  preset: str,
  rows: int,
  length: int,
  remat: str,
  logits_chunk: int,
  repeats: int,
  compile_only: bool = False,
  mesh_shape: tuple[int, ...] = (1, 1, 1),
):
  config = STEP_CONFIG
  model_config = models.get_preset(
    preset, remat=remat, logits_chunk=logits_chunk
  )
  make_inputs = lambda: synthetic_inputs(rows, length, model_config.vocab_size)
  if compile_only:
    state = abstract_train_state(model_config, config.optimizer)
    layout = make_layout(state, shd.make_mesh(mesh_shape))
    inputs = jax.eval_shape(make_inputs)
  else:
    state, layout = create_train_state(
      model_config, config.optimizer, mesh=shd.make_mesh(mesh_shape)
    )
    inputs = make_inputs()
  step = step_lib.make_train_step(config, layout)
  start = time.perf_counter()
  compiled = step.jitted.lower(state, inputs).compile()
  compile_s = time.perf_counter() - start
  memory = compiled.memory_analysis()
  sizes = {
    "preset": preset,
    "rows": rows,
    "length": length,
    "remat": remat,
    "logits_chunk": logits_chunk,
    "mesh": list(mesh_shape),
    "temp_mib": memory.temp_size_in_bytes / MiB,
    "argument_mib": memory.argument_size_in_bytes / MiB,
    "compile_s": compile_s,
  }
  if compile_only:
    return sizes
  inputs = jax.device_put(inputs, layout.data)
  state, metrics = compiled(state, inputs)  # the state is donated
  first = {k: float(metrics[k]) for k in ("loss", "grad_norm")}
  state, _, seconds = timed_updates(compiled, state, inputs, repeats)
  return {
    **sizes,
    "seconds_per_update": statistics.median(seconds),
    "seconds_all": seconds,
    "tokens_per_s": rows * length / statistics.median(seconds),
    **{f"first_{k}": v for k, v in first.items()},
  }


def main(argv):
  parser = argparse.ArgumentParser(prog="bench.py remat")
  parser.add_argument("--preset", default="tiny")
  parser.add_argument("--rows", type=int, default=8)
  parser.add_argument("--lengths", default="512,1024")
  parser.add_argument("--logits_chunks", default="0")
  parser.add_argument(
    "--mesh",
    default="1,1,1",
    help="data,fsdp,tensor; memory is then per device (simulate devices "
    "with XLA_FLAGS=--xla_force_host_platform_device_count=N)",
  )
  parser.add_argument(
    "--remats", default=",".join(REMAT), help="subset of " + ",".join(REMAT)
  )
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--out", default="experiments/benchmarks/remat.json")
  parser.add_argument(
    "--compile_only",
    action="store_true",
    help="compile from shapes and report memory only (real-size presets)",
  )
  args = parser.parse_args(argv)

  rows = []
  for length in (int(x) for x in args.lengths.split(",")):
    base = None
    variants = [
      (remat, int(chunk))
      for chunk in args.logits_chunks.split(",")
      for remat in args.remats.split(",")
    ]
    for remat, chunk in variants:
      r = measure(
        args.preset,
        args.rows,
        length,
        remat,
        chunk,
        args.repeats,
        args.compile_only,
        tuple(int(x) for x in args.mesh.split(",")),
      )
      base = base or r
      r["temp_vs_none"] = r["temp_mib"] / base["temp_mib"]
      line = (
        f"{args.preset} {r['rows']:>3} x {r['length']:<5} {remat:>5} "
        f"chunk {chunk:<4}  temp "
        f"{r['temp_mib']:9.1f} MiB ({r['temp_vs_none']:.2f}x)  compile "
        f"{r['compile_s']:5.1f} s"
      )
      if not args.compile_only:
        r["time_vs_none"] = r["seconds_per_update"] / base["seconds_per_update"]
        r["loss_diff_vs_none"] = abs(r["first_loss"] - base["first_loss"])
        r["grad_norm_rel_diff_vs_none"] = abs(
          r["first_grad_norm"] / base["first_grad_norm"] - 1
        )
        line += (
          f"  update {r['seconds_per_update']:6.3f} s "
          f"({r['time_vs_none']:.2f}x)  |dloss| {r['loss_diff_vs_none']:.1e}"
          f"  dgrad_norm {r['grad_norm_rel_diff_vs_none']:.1e}"
        )
      rows.append(r)
      print(line, flush=True)
  out = pathlib.Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  meta = {
    "machine": platform.platform(),
    "processor": platform.processor(),
    "cpus": os.cpu_count(),
    "jax": jax.__version__,
    "backend": jax.default_backend(),
    "command": "python scripts/bench.py remat " + " ".join(argv),
  }
  out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
  print(f"wrote {out}")
