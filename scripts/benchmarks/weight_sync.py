"""New weights into per-process samplers: `python scripts/bench.py weight_sync`.

A multi-process run with per-process rollouts moves its training weights,
after every update, from the mesh that spans the processes onto each
process's own block of it (`sharding.local_mesh`), laid out by the sampling
rules. Two local processes of `--devices_each` simulated CPU devices hold a
preset's weights (random, born sharded by the training rules) and time that
move two ways:

  host     read to host first (`sharding.to_host`: from own shards when
           every process holds the whole, else gathered), then placed:
           how per-process samplers were fed before `to_own_devices`;
  device   `sharding.shard_state`, device to device
           (`sharding.to_own_devices`): own buffers kept when every
           process holds the whole, else one device all-gather first.

on two meshes: `2,1,4` (data over the processes: the weights are
replicated across them) and `1,2,4` (fsdp over the processes: the training
rules split the embedding dimension across them). Reported: the median
milliseconds of `--reps` moves after one warm-up each (process 0's; both
processes run every move together), the weights' MiB, and whether the two
ways gave the same arrays.

Prints a table and writes JSON (default
experiments/benchmarks/weight_sync.json).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "benchmarks" / "weight_sync.json"
MESHES = ("2,1,4", "1,2,4")


def _random_params(preset: str, dtype: str, mesh):
  """A preset's weights, random and born sharded by the training rules."""
  import jax
  from flax import nnx

  from agentic_rl import sharding as shd
  from agentic_rl.models import build_abstract, get_preset

  config = get_preset(preset, param_dtype=dtype, dtype=dtype)
  _, abstract = nnx.split(build_abstract(config))
  shardings = shd.state_shardings(abstract, mesh, shd.DEFAULT_TRAIN_RULES)
  shapes, treedef = jax.tree.flatten(abstract)

  def init(key):
    keys = jax.random.split(key, len(shapes))
    return [
      0.02 * jax.random.normal(k, s.shape, s.dtype)
      for k, s in zip(keys, shapes, strict=True)
    ]

  values = jax.jit(init, out_shardings=treedef.flatten_up_to(shardings))(
    jax.random.key(0)
  )
  return jax.tree.unflatten(treedef, values)


def worker(args) -> None:
  """One process of the pair: prints one JSON line per mesh."""
  from agentic_rl import sweeps

  sweeps.initialize_distributed()
  import jax
  import numpy as np

  from agentic_rl import sharding as shd

  for shape in args.meshes.split(","):
    mesh = shd.make_mesh(tuple(int(n) for n in shape.split("x")))
    local = shd.local_mesh(mesh)
    params = _random_params(args.preset, args.dtype, mesh)
    leaves = jax.tree.leaves(params)

    def host(params=params, local=local):
      return shd.shard_state(
        shd.to_host(params), local, shd.DEFAULT_SAMPLE_RULES
      )

    def device(params=params, local=local):
      return shd.shard_state(params, local, shd.DEFAULT_SAMPLE_RULES)

    ways = {"host": host, "device": device}
    seconds = {name: [] for name in ways}
    got = {name: jax.block_until_ready(f()) for name, f in ways.items()}
    same = all(
      np.array_equal(np.asarray(a), np.asarray(b))
      for a, b in zip(
        jax.tree.leaves(got["host"]),
        jax.tree.leaves(got["device"]),
        strict=True,
      )
    )
    del got
    for _ in range(args.reps):
      for name, f in ways.items():
        start = time.perf_counter()
        jax.block_until_ready(f())
        seconds[name].append(time.perf_counter() - start)
    row = {
      "mesh": shape.replace("x", ","),
      "process": jax.process_index(),
      "preset": args.preset,
      "dtype": args.dtype,
      "leaves": len(leaves),
      "mib": sum(x.nbytes for x in leaves) / 2**20,
      "split_across_processes": any(
        not shd._each_process_holds_whole(x) for x in leaves
      ),
      "same_arrays": bool(same),
      **{f"{n}_ms": 1e3 * statistics.median(s) for n, s in seconds.items()},
      **{f"{n}_all_ms": [1e3 * t for t in s] for n, s in seconds.items()},
    }
    print(json.dumps(row), flush=True)


def print_table(rows: list[dict]) -> None:
  print(
    f"{'preset':<12} {'dtype':<9} {'mesh':<6} {'MiB':>7} {'split':>5} "
    f"{'host ms':>9} {'device ms':>9} {'same':>5}"
  )
  for r in rows:
    print(
      f"{r['preset']:<12} {r['dtype']:<9} {r['mesh']:<6} {r['mib']:>7.1f} "
      f"{'yes' if r['split_across_processes'] else 'no':>5} "
      f"{r['host_ms']:>9.1f} {r['device_ms']:>9.1f} "
      f"{'yes' if r['same_arrays'] else 'NO':>5}"
    )


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(prog="bench.py weight_sync")
  parser.add_argument("--presets", default="tiny,qwen3-0.6b")
  parser.add_argument("--dtype", default="bfloat16")
  parser.add_argument("--meshes", default=";".join(MESHES))
  parser.add_argument("--devices_each", type=int, default=4)
  parser.add_argument("--reps", type=int, default=5)
  parser.add_argument("--timeout", type=float, default=1800.0)
  parser.add_argument("--out", default=str(DEFAULT_OUT))
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--preset", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  sys.path.insert(0, str(ROOT))
  if args.worker:
    worker(args)
    return
  from agentic_rl import machine
  from benchmarks import _local

  # Mesh shapes travel as 2x1x4 (commas separate the meshes).
  meshes = ",".join(m.replace(",", "x") for m in args.meshes.split(";"))
  rows = []
  for preset in args.presets.split(","):
    argv = [
      sys.executable,
      str(ROOT / "scripts" / "bench.py"),
      "weight_sync",
      "--worker",
      f"--preset={preset}",
      f"--dtype={args.dtype}",
      f"--meshes={meshes}",
      f"--reps={args.reps}",
    ]
    lines = _local.worker_lines(
      argv, 2, devices_each=args.devices_each, timeout=args.timeout, what=preset
    )[0]  # process 0's
    rows.extend(lines)
    print_table(lines)
  print()
  print_table(rows)
  report = {
    "benchmark": "weight_sync",
    "processes": 2,
    "devices_each": args.devices_each,
    "reps": args.reps,
    "rows": rows,
    "machine": machine.describe(probe=False),
  }
  _local.write_report(args.out, report)
