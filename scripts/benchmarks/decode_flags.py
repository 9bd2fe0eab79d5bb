"""XLA flags A/B of the sampler: `python scripts/bench.py decode_flags [flags]`.

XLA reads `XLA_FLAGS` once per process, so each arm runs in its own child
process (this script again, with `--worker`) under the parent's flags plus
the arm's. A child builds a random model of `--preset` / `--dtype` (seed 0,
so every arm holds the same weights), a `Sampler` of `--batch` slots, and
times one single turn: prefill of 64-token prompts, then a decode of
`--steps` greedy tokens, as `bench.py sampler` does. Reported per arm: the
first call's extra seconds (compile), best-of-`--repeats` turn seconds and
new tokens/s, best ms per decode step from a decode-only timing, a SHA-256
of the emitted tokens (an arm that changes the numbers shows up as a
different hash), and on an accelerator the peak device memory.

`--passes` runs the arm sequence again (A B A B ...), so a drift in the
machine's speed shows as a spread between an arm's passes instead of as a
difference between arms. An arm whose child fails (an unknown flag makes
XLA abort) is reported with its exit status and the tail of its stderr;
the others still run.

    python scripts/bench.py decode_flags --preset=qwen3-0.6b --dtype=bfloat16 \\
        --arm default= --arm while='--xla_gpu_enable_command_buffer=...'

Prints a table and writes JSON (default
experiments/benchmarks/decode_flags.json).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import platform
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "benchmarks" / "decode_flags.json"
PROMPT_LEN = 64


def parse_arm(text: str) -> tuple[str, str]:
  """ "name=flags" -> (name, flags); flags may be empty (the parent's own)."""
  name, sep, flags = text.partition("=")
  if not sep or not name:
    raise argparse.ArgumentTypeError(
      f"--arm wants NAME=XLA_FLAGS (flags may be empty), got {text!r}"
    )
  return name, flags


def worker(args) -> dict:
  """One arm, in this process: times a single turn and the decode step."""
  sys.path.insert(0, str(ROOT))
  import jax
  import numpy as np
  from flax import nnx

  from agentic_rl import models
  from agentic_rl.sampling import Sampler

  config = models.get_preset(
    args.preset, dtype=args.dtype, param_dtype=args.dtype
  )
  start = time.perf_counter()
  model = models.Transformer(config, rngs=nnx.Rngs(0))
  build_s = time.perf_counter() - start
  rng = np.random.default_rng(0)
  prompts = rng.integers(0, config.vocab_size, (args.batch, PROMPT_LEN))
  prompts = prompts.tolist()  # once, outside the timings
  sampler = Sampler(
    model,
    num_slots=args.batch,
    max_len=PROMPT_LEN + args.steps,
    chunk_buckets=(PROMPT_LEN,),
    budget_buckets=(args.steps,),
  )
  rows = list(range(args.batch))
  key = jax.random.key(0)

  def turn():
    sampler.prefill(rows, prompts)
    return np.stack(sampler.decode(key, budget=args.steps).tokens)

  # As `bench.py sampler`'s `decode_timer`, but on this sampler: its own
  # would compile the model again (25 s for the 0.6B model on an H200).
  def decode_only() -> float:
    sampler.prefill(rows, prompts)
    jax.block_until_ready(sampler.state)
    start = time.perf_counter()
    sampler.decode(key, budget=args.steps)
    return time.perf_counter() - start

  start = time.perf_counter()
  tokens = turn()
  first_s = time.perf_counter() - start
  turn_s, decode_s = [], []
  for _ in range(args.repeats):
    start = time.perf_counter()
    again = turn()
    turn_s.append(time.perf_counter() - start)
    decode_s.append(decode_only())
  if not np.array_equal(again, tokens):
    raise RuntimeError("greedy decoding emitted different tokens on a rerun")
  stats = jax.devices()[0].memory_stats() or {}
  return {
    "xla_flags": os.environ.get("XLA_FLAGS", ""),
    "backend": jax.default_backend(),
    "device_kind": jax.devices()[0].device_kind,
    "jax": jax.__version__,
    "build_seconds": build_s,
    "compile_seconds": max(first_s - min(turn_s), 0.0),
    "turn_seconds": min(turn_s),
    "tokens_per_s": args.batch * args.steps / min(turn_s),
    "decode_step_ms": 1e3 * min(decode_s) / args.steps,
    "tokens_sha256": hashlib.sha256(
      tokens.astype(np.int64).tobytes()
    ).hexdigest()[:16],
    "peak_bytes": stats.get("peak_bytes_in_use"),
  }


def run_arm(args, name: str, flags: str, argv: list[str]) -> dict:
  """Runs one arm in a child process; its JSON, or how it failed."""
  env = dict(os.environ)
  env["XLA_FLAGS"] = " ".join(
    f for f in (os.environ.get("XLA_FLAGS", ""), flags) if f
  )
  command = [sys.executable, str(ROOT / "scripts" / "bench.py")]
  command += ["decode_flags", "--worker", *argv]
  start = time.perf_counter()
  try:
    done = subprocess.run(
      command,
      env=env,
      capture_output=True,
      text=True,
      timeout=args.arm_timeout,
    )
  except subprocess.TimeoutExpired:
    return {"arm": name, "flags": flags, "error": "timeout", "rc": None}
  row = {"arm": name, "flags": flags, "rc": done.returncode}
  row["wall_seconds"] = time.perf_counter() - start
  lines = done.stdout.strip().splitlines()
  if done.returncode != 0 or not lines:
    row["error"] = "child failed"
    row["stderr_tail"] = done.stderr[-2000:]
    return row
  row.update(json.loads(lines[-1]))
  return row


def print_table(rows: list[dict]) -> None:
  print(
    "| arm | pass | tok/s | turn s | decode ms/step | compile s "
    "| tokens | peak GiB |"
  )
  print("|---|---|---|---|---|---|---|---|")
  for r in rows:
    if "error" in r:
      print(f"| {r['arm']} | {r['pass']} | {r['error']} (rc {r['rc']}) |")
      continue
    peak = r["peak_bytes"] / 2**30 if r["peak_bytes"] else float("nan")
    print(
      f"| {r['arm']} | {r['pass']} | {r['tokens_per_s']:,.0f} "
      f"| {r['turn_seconds']:.4f} | {r['decode_step_ms']:.3f} "
      f"| {r['compile_seconds']:.1f} | {r['tokens_sha256']} | {peak:.2f} |"
    )


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(prog="bench.py decode_flags")
  parser.add_argument("--preset", default="qwen3-bench")
  parser.add_argument(
    "--dtype", default="float32", choices=("float32", "bfloat16")
  )
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--steps", type=int, default=64)
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument(
    "--arm",
    type=parse_arm,
    action="append",
    help="NAME=XLA_FLAGS, added to the parent's XLA_FLAGS (repeatable)",
  )
  parser.add_argument("--passes", type=int, default=1)
  parser.add_argument("--arm_timeout", type=float, default=600.0)
  parser.add_argument("--out", default=str(DEFAULT_OUT))
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    print(json.dumps(worker(args)))
    return
  arms = args.arm or [("default", "")]
  if len({name for name, _ in arms}) != len(arms):
    raise SystemExit("--arm names must differ")
  child_argv = [
    f"--preset={args.preset}",
    f"--dtype={args.dtype}",
    f"--batch={args.batch}",
    f"--steps={args.steps}",
    f"--repeats={args.repeats}",
  ]
  rows = []
  for p in range(args.passes):
    for name, flags in arms:
      row = run_arm(args, name, flags, child_argv) | {"pass": p}
      rows.append(row)
      print_table([row])
  ok = [r for r in rows if "error" not in r]
  report = {
    "command": "python scripts/bench.py decode_flags " + " ".join(argv),
    "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count()},
    "parent_xla_flags": os.environ.get("XLA_FLAGS", ""),
    "preset": args.preset,
    "dtype": args.dtype,
    "batch": args.batch,
    "steps": args.steps,
    "rows": rows,
    # Every arm that ran emitted the same tokens as every other.
    "same_tokens": len({r["tokens_sha256"] for r in ok}) <= 1,
  }
  print()
  print_table(rows)
  print(f"same tokens in every arm: {report['same_tokens']}")
  out = pathlib.Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(report, indent=2) + "\n")
  print(f"\nwrote {out}")
