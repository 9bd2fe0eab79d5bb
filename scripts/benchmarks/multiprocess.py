"""Rollouts across processes: `python scripts/bench.py multiprocess [flags]`.

Trains one config (no cold start, `--rl_steps` RL steps) on the same
`--mesh` of simulated CPU devices three ways, each a fresh launch:

  one          one process holding all `--devices` devices;
  replicated   `--processes` processes (`config.mesh.rollouts=replicated`):
               each plays every episode on the whole mesh, in lockstep;
  per_process  the same processes (the default placement): each plays its
               part of the episodes on its own block of the mesh, and the
               parts are gathered.

Reported per arm, from the run's metrics.jsonl: the median over RL steps
2.. of the rollout's seconds and the update's, step 1's (which compiles),
the episodes a step, the first evaluation's seconds (it compiles the
samplers' programs), and the launch's wall seconds. On one machine the
processes share its cores, so this measures what a process does (the
work repeated or split), not a pod's speed.

Prints a table and writes JSON (default
experiments/benchmarks/multiprocess.json).
"""

from __future__ import annotations

import argparse
import itertools
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "benchmarks" / "multiprocess.json"
ARMS = ("one", "replicated", "per_process")
WIDER = (  # 32 episodes a step instead of the smoke config's 4
  "--config.rl.tasks_per_step=8",
  "--config.rollout.group_size=4",
  "--config.sampler.num_slots=16",
)


def run_arm(args, arm: str, workdir: pathlib.Path) -> dict:
  from agentic_rl import sweeps
  from agentic_rl.train.logging import read_jsonl

  argv = [
    sys.executable,
    "-m",
    "agentic_rl.main",
    f"--config={args.config}",
    f"--workdir={workdir}",
    f"--config.mesh.shape=({args.mesh})",
    "--config.sft.steps=0",
    f"--config.rl.steps={args.rl_steps}",
    f"--config.eval_every={args.rl_steps}",
    f"--config.checkpoint_every={args.rl_steps}",
    *args.override,
  ]
  if arm == "replicated":
    argv.append("--config.mesh.rollouts=replicated")
  start, launched = time.perf_counter(), time.time()
  if arm == "one":
    outs = [
      _run_one(argv, sweeps.simulated_devices_env(args.devices), args.timeout)
    ]
  else:
    outs = sweeps.launch_local_processes(
      argv,
      args.processes,
      devices_each=args.devices // args.processes,
      cwd=ROOT,
      timeout=args.timeout,
    )
  wall, ended = time.perf_counter() - start, time.time()
  failed = [(i, err) for i, (code, _, err) in enumerate(outs) if code != 0]
  if failed:
    return {
      "arm": arm,
      "error": f"process {failed[0][0]}: {failed[0][1][-2000:]}",
    }
  rows = read_jsonl(str(workdir / "logs" / "metrics.jsonl"))
  processes = 1 if arm == "one" else args.processes
  return {"arm": arm, "processes": processes, "wall_s": wall} | summarize(
    rows, launched, ended
  )


def summarize(rows: list[dict], launched: float, ended: float) -> dict:
  """A run's timings from its metrics.jsonl rows (`time` stamps between
  `launched` and `ended`)."""
  steps = [r for r in rows if "episodes" in r and "train_seconds" in r]
  later = steps[1:] or steps
  evals = [r["eval/seconds"] for r in rows if "eval/seconds" in r]
  return {
    "rl_steps": len(steps),
    "episodes_per_step": steps[-1]["episodes"],
    "first_rollout_s": steps[0]["seconds"],
    "first_train_s": steps[0]["train_seconds"],
    "rollout_s": statistics.median(r["seconds"] for r in later),
    "train_s": statistics.median(r["train_seconds"] for r in later),
    # the new weights into the samplers, before each step's rollout
    "sync_s": statistics.median(r["sync_seconds"] for r in later),
    "first_eval_s": evals[0] if evals else None,
    # launch to the first logged row (start-up, the numerics probe, the
    # first evaluation), and the last row to the end (the summary)
    "before_first_row_s": rows[0]["time"] - launched,
    "after_last_row_s": ended - rows[-1]["time"],
    "between_steps_s": [
      b["time"] - a["time"] for a, b in itertools.pairwise(steps)
    ],
    "success_rate": [r["success_rate"] for r in steps],
  }


def _run_one(argv, env, timeout) -> tuple[int, str, str]:
  p = subprocess.run(
    argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
  )
  return p.returncode, p.stdout, p.stderr


def print_table(rows: list[dict]) -> None:
  print(
    f"{'arm':<12} {'procs':>5} {'episodes':>8} {'rollout s':>9} "
    f"{'update s':>8} {'sync s':>6} {'step 1 s':>13} {'eval s':>7} "
    f"{'wall s':>7}"
  )
  for r in rows:
    if "error" in r:
      print(f"{r['arm']:<12} failed: {r['error'].splitlines()[-1]}")
      continue
    print(
      f"{r['arm']:<12} {r['processes']:>5} {r['episodes_per_step']:>8.0f} "
      f"{r['rollout_s']:>9.2f} {r['train_s']:>8.2f} {r['sync_s']:>6.3f} "
      f"{r['first_rollout_s']:>6.1f} + {r['first_train_s']:>4.1f} "
      f"{r['first_eval_s'] or float('nan'):>7.2f} {r['wall_s']:>7.1f}"
    )


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(prog="bench.py multiprocess")
  parser.add_argument("--config", default="configs/sokoban.py:gigpo,smoke")
  parser.add_argument("--mesh", default="2,1,4")
  parser.add_argument("--devices", type=int, default=8)
  parser.add_argument("--processes", type=int, default=2)
  parser.add_argument("--rl_steps", type=int, default=4)
  parser.add_argument(
    "--override",
    action="append",
    help="a --config.X=Y flag for every arm (repeatable; replaces the "
    f"default wider rollout, {' '.join(WIDER)})",
  )
  parser.add_argument("--arms", default=",".join(ARMS))
  parser.add_argument("--timeout", type=float, default=1800.0)
  parser.add_argument(
    "--keep", default="", help="write the runs here instead of a temp dir"
  )
  parser.add_argument("--out", default=str(DEFAULT_OUT))
  args = parser.parse_args(argv)
  args.override = list(args.override or WIDER)
  if args.devices % args.processes:
    raise SystemExit("--devices must divide by --processes")
  arms = args.arms.split(",")
  if not set(arms) <= set(ARMS):
    raise SystemExit(f"--arms: choose from {ARMS}")
  sys.path.insert(0, str(ROOT))
  from agentic_rl import machine
  from benchmarks import _local

  rows = []
  with tempfile.TemporaryDirectory(prefix="bench_multiprocess_") as tmp:
    for arm in arms:
      rows.append(run_arm(args, arm, pathlib.Path(args.keep or tmp) / arm))
      print_table(rows[-1:])
  print()
  print_table(rows)
  report = {
    "benchmark": "multiprocess",
    "config": args.config,
    "mesh": args.mesh,
    "devices": args.devices,
    "processes": args.processes,
    "overrides": args.override,
    "rows": rows,
    "machine": machine.describe(probe=False),
  }
  _local.write_report(args.out, report)
