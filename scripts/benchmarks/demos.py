"""Expert demonstrations split over processes: `python scripts/bench.py demos`.

A run's cold start replays the environment's scripted expert on the
config's demo tasks (`loop.sft_demo_tasks`, `rollout.demos`). In a
multi-process run each process replays its contiguous part of them and the
parts are gathered (`expert_trajectories(..., per_process=True)`); before,
every process replayed all of them. For each config this times the replay
of its demo tasks as 1 and as 2 local processes of one job (each process
also checks the demos' host-side framing: the tokens and rewards) and
reports the median seconds of `--reps` replays (process 0's; the gather
included), the speed-up, and whether every process count gave the same
demonstrations (a digest of their records).

Sokoban's expert is A* over a small board (milliseconds a level); code
repair's runs the task's tests in the sandbox, a subprocess a check, which
is where splitting pays. On one machine the processes share its cores.

Prints a table and writes JSON (default experiments/benchmarks/demos.json).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "benchmarks" / "demos.json"
CONFIGS = ("configs/sokoban.py:gigpo", "configs/code_repair.py:gigpo")


def worker(args) -> None:
  """One process of the job: prints one JSON line."""
  from agentic_rl import sweeps

  sweeps.initialize_distributed()
  import jax

  from agentic_rl import rewards
  from agentic_rl.models.tokenizer import build_env_tokenizer
  from agentic_rl.rollout import RolloutConfig, env_factory_from_options
  from agentic_rl.rollout.demos import expert_trajectories
  from agentic_rl.train import loop

  config = sweeps.load_config(args.config)
  tasks = loop.sft_demo_tasks(loop.task_pool(config).split("train"), config.sft)
  framing = (
    env_factory_from_options({config.env.name: dict(config.env.options)}),
    build_env_tokenizer(),
    RolloutConfig.from_mapping(config.rollout),
    rewards.from_config(config.rewards),
  )
  seconds, demos = [], []
  for _ in range(args.reps):
    start = time.perf_counter()
    demos = expert_trajectories(tasks, *framing, per_process=True)
    seconds.append(time.perf_counter() - start)
  records = json.dumps([d.to_dict() for d in demos], sort_keys=True)
  print(
    json.dumps(
      {
        "config": args.config,
        "processes": jax.process_count(),
        "process": jax.process_index(),
        "demos": len(demos),
        "solved": sum(framing[3].succeeded(d) for d in demos),
        "digest": hashlib.blake2b(records.encode(), digest_size=8).hexdigest(),
        "seconds": statistics.median(seconds),
        "all_seconds": seconds,
      }
    ),
    flush=True,
  )


def print_table(rows: list[dict]) -> None:
  print(
    f"{'config':<36} {'demos':>5} {'solved':>6} {'procs':>5} "
    f"{'seconds':>8} {'speed-up':>8} {'same':>5}"
  )
  for r in rows:
    print(
      f"{r['config']:<36} {r['demos']:>5} {r['solved']:>6} "
      f"{r['processes']:>5} {r['seconds']:>8.2f} {r['speedup']:>7.2f}x "
      f"{'yes' if r['same_demos'] else 'NO':>5}"
    )


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(prog="bench.py demos")
  parser.add_argument("--configs", nargs="+", default=list(CONFIGS))
  parser.add_argument("--processes", default="1,2")
  parser.add_argument("--reps", type=int, default=3)
  parser.add_argument("--timeout", type=float, default=1800.0)
  parser.add_argument("--out", default=str(DEFAULT_OUT))
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--config", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  sys.path.insert(0, str(ROOT))
  if args.worker:
    worker(args)
    return
  from agentic_rl import machine
  from benchmarks import _local

  rows = []
  for spec in args.configs:
    found = []
    for n in (int(p) for p in args.processes.split(",")):
      argv = [
        sys.executable,
        str(ROOT / "scripts" / "bench.py"),
        "demos",
        "--worker",
        f"--config={spec}",
        f"--reps={args.reps}",
      ]
      each = _local.worker_lines(
        argv, n, devices_each=1, timeout=args.timeout, what=f"{n} ({spec})"
      )
      lines = [line for lines in each for line in lines]
      found.append((lines[0], {x["digest"] for x in lines}))
    one = found[0][0]["seconds"]
    digests = set().union(*(d for _, d in found))
    for row, _ in found:
      rows.append(
        {
          **row,
          "speedup": one / row["seconds"],
          "same_demos": len(digests) == 1,
        }
      )
  print_table(rows)
  report = {
    "benchmark": "demos",
    "reps": args.reps,
    "rows": rows,
    "machine": machine.describe(probe=False),
  }
  _local.write_report(args.out, report)
