"""Rollout driver throughput: `python scripts/bench.py rollout [flags]`.

Workload (defaults): Sokoban difficulty 0 without the instruction preamble
(the prompt is the 6x6 grid), the "tiny" preset with random weights, 16
episodes (8 tasks x group 2) on 8 slots, 5 turns of exactly 16 new tokens at
temperature 1. A random policy almost never closes a tag, so each turn ends
on its token budget, Sokoban calls the text malformed and the episode goes
on: every episode plays all 5 turns (80 env steps per run).

Rows ("1x8": one 8-slot sampler; "2x4": two 4-slot samplers, one per
micro-batch; "+lat": every env step sleeps --latency_ms first; "w": threads
stepping one micro-batch's envs):
  serial 1x8 (w1)      decode all 8 rows, then step their envs one by one
  serial 2x4 (w1)      decode micro-batch A, step A, decode B, step B
  pipelined 2x4 (w1)   B's envs step on a worker thread while A decodes,
                       then the roles swap
  pipelined 2x4 (w4)   the same, B's four env steps run concurrently
  split-one (w4)       pipelined over the two halves of ONE 8-slot sampler
                       (a decode on half the rows still computes all 8)
  reprefill 1x8        serial 1x8, but every turn re-prefills the whole
                       history instead of extending the cache

hidden = 1 - (pipelined+lat - base) / (serial+lat - base) with base and
serial both "serial 2x4 (w1)", so the compute layout is the same and only
the overlap differs; `hidden vs 1x8` uses serial 1x8 as base and serial 1x8
+lat as the serial latency run instead. On a CPU-only machine the "device"
and the host share the same cores, so only the sleep can hide; splitting one
decode into two half-size ones also costs some throughput (compare the two
serial rows without latency).

Each row is run once to compile, then --repeats times; the median is kept.
Flags: --episodes, --group, --slots, --turns, --tokens, --latency_ms,
--repeats, --out (default experiments/benchmarks/rollout.json).
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
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from agentic_rl import envs, estimators, models  # noqa: E402
from agentic_rl.data import packing  # noqa: E402
from agentic_rl.envs.base import Environment, StepResult  # noqa: E402
from agentic_rl.models import build_env_tokenizer  # noqa: E402
from agentic_rl.rewards import RewardStack  # noqa: E402
from agentic_rl.rollout import Rollout, RolloutConfig, make_samplers  # noqa: E402
from agentic_rl.sampling import Sampler  # noqa: E402
from agentic_rl.train import step as step_lib  # noqa: E402
from agentic_rl.train.state import (  # noqa: E402
  OptimizerConfig,
  create_train_state,
)
from agentic_rl.types import Task, turns_to_tokens  # noqa: E402

MAX_LEN = 512


class SlowEnv(Environment):
  """Wraps an environment; every step sleeps first (a slow tool)."""

  def __init__(self, inner: Environment, latency_s: float):
    self.inner, self.latency_s = inner, latency_s
    self.name = inner.name

  def generate_task(self, seed: int, difficulty: int = 0) -> Task:
    return self.inner.generate_task(seed, difficulty)

  def reset(self, task: Task, seed: int = 0) -> str:
    return self.inner.reset(task, seed)

  def step(self, action_text: str) -> StepResult:
    time.sleep(self.latency_s)
    return self.inner.step(action_text)


def factory(latency_ms: float):
  def make(task: Task) -> Environment:
    env = envs.make("sokoban", instructions=False)
    return SlowEnv(env, latency_ms / 1000) if latency_ms else env

  return make


def samplers_for(model, layout: str, slots: int) -> list[Sampler]:
  if layout == "split":
    return make_samplers(model, num_slots=slots, max_len=MAX_LEN)
  return [Sampler(model, num_slots=slots, max_len=MAX_LEN)]


def run_case(
  model,
  tokenizer,
  tasks,
  args,
  *,
  layout,
  pipeline,
  workers,
  latency_ms,
  reprefill,
) -> dict[str, Any]:
  config = RolloutConfig(
    group_size=args.group,
    max_turns=args.turns,
    max_new_tokens=args.tokens,
    max_total_tokens=MAX_LEN,
    temperature=1.0,
    pipeline=pipeline,
    num_microbatches=2,
    env_workers=workers,
    reprefill=reprefill,
  )
  rollout = Rollout(
    samplers_for(model, layout, args.slots),
    tokenizer,
    factory(latency_ms),
    RewardStack(),
    config,
  )
  seconds, metrics = [], {}
  for i in range(args.repeats + 1):  # the first run compiles
    rollout.run(tasks, jax.random.PRNGKey(i))
    if i:
      metrics = rollout.last_metrics
      seconds.append(metrics["seconds"])
  s = statistics.median(seconds)
  return {
    "seconds": s,
    "seconds_all": seconds,
    "episodes_per_s": metrics["episodes"] / s,
    "generated_tokens_per_s": metrics["generated_tokens"] / s,
    "turns_per_episode": metrics["turns_per_episode"],
    "tokens_per_episode": metrics["tokens_per_episode"],
    "env_steps": metrics["episodes"] * metrics["turns_per_episode"],
  }


def train_throughput(trajectories, repeats: int) -> dict[str, float]:
  """The RL update's tokens/s on these rollouts (tiny preset, one jit).

  Tokens are the batch's real (non-padding) tokens, all of which go through
  forward and backward; the first call compiles and is not timed.
  """
  batch = packing.pack(trajectories)
  adv_BxL = turns_to_tokens(estimators.get("gigpo")(batch), batch.turn_id_BxL)
  config = step_lib.StepConfig(optimizer=OptimizerConfig(learning_rate=1e-5))
  state, layout = create_train_state(
    models.get_preset("tiny"), config.optimizer
  )
  step = step_lib.make_train_step(config, layout)
  inputs = step_lib.PolicyInputs(batch, adv_BxL)
  state, metrics = step(state, inputs)
  jax.block_until_ready(metrics)
  start = time.perf_counter()
  for _ in range(repeats):
    state, metrics = step(state, inputs)
  jax.block_until_ready(metrics)
  seconds = (time.perf_counter() - start) / repeats
  tokens = int((np.asarray(batch.turn_id_BxL) >= 0).sum())
  return {
    "rows": int(batch.tokens_BxL.shape[0]),
    "padded_length": int(batch.tokens_BxL.shape[1]),
    "tokens": tokens,
    "seconds_per_step": seconds,
    "tokens_per_s": tokens / seconds,
  }


CASES = (
  # label, layout, pipeline, env workers, latency?, reprefill
  ("serial 1x8", "one", False, 1, False, False),
  ("serial 1x8 +lat", "one", False, 1, True, False),
  ("serial 2x4", "split", False, 1, False, False),
  ("serial 2x4 +lat", "split", False, 1, True, False),
  ("pipelined 2x4 w1", "split", True, 1, False, False),
  ("pipelined 2x4 w1 +lat", "split", True, 1, True, False),
  ("pipelined 2x4 w4", "split", True, 4, False, False),
  ("pipelined 2x4 w4 +lat", "split", True, 4, True, False),
  ("split-one w4 +lat", "one", True, 4, True, False),
  ("reprefill 1x8", "one", False, 1, False, True),
)


def hidden_fraction(rows, pipelined: str, base: str, serial: str) -> float:
  """1 - (pipelined+lat - base) / (serial+lat - base), in seconds."""
  b = rows[base]["seconds"]
  return 1 - (rows[pipelined]["seconds"] - b) / (rows[serial]["seconds"] - b)


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(prog="bench.py rollout")
  parser.add_argument("--episodes", type=int, default=16)
  parser.add_argument("--group", type=int, default=2)
  parser.add_argument("--slots", type=int, default=8)
  parser.add_argument("--turns", type=int, default=5)
  parser.add_argument("--tokens", type=int, default=16)
  parser.add_argument("--latency_ms", type=float, default=20.0)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument(
    "--out", default=str(ROOT / "experiments/benchmarks/rollout.json")
  )
  args = parser.parse_args(argv)

  tokenizer = build_env_tokenizer()
  model = models.build("tiny", 0)
  sokoban = envs.make("sokoban")
  tasks = [
    sokoban.generate_task(seed) for seed in range(args.episodes // args.group)
  ]
  rows = {}
  for label, layout, pipeline, workers, lat, reprefill in CASES:
    rows[label] = run_case(
      model,
      tokenizer,
      tasks,
      args,
      layout=layout,
      pipeline=pipeline,
      workers=workers,
      latency_ms=args.latency_ms if lat else 0.0,
      reprefill=reprefill,
    )
  serial, base = "serial 2x4 +lat", "serial 2x4"
  hidden = {
    "pipelined w4": hidden_fraction(
      rows, "pipelined 2x4 w4 +lat", base, serial
    ),
    "pipelined w1": hidden_fraction(
      rows, "pipelined 2x4 w1 +lat", base, serial
    ),
    "pipelined w4 vs 1x8": hidden_fraction(
      rows, "pipelined 2x4 w4 +lat", "serial 1x8", "serial 1x8 +lat"
    ),
    "split-one w4 vs 1x8": hidden_fraction(
      rows, "split-one w4 +lat", "serial 1x8", "serial 1x8 +lat"
    ),
  }
  added = rows[serial]["seconds"] - rows[base]["seconds"]
  trainer = Rollout(
    samplers_for(model, "one", args.slots),
    tokenizer,
    factory(0.0),
    RewardStack(),
    RolloutConfig(
      group_size=args.group,
      max_turns=args.turns,
      max_new_tokens=args.tokens,
      max_total_tokens=MAX_LEN,
    ),
  )
  train = train_throughput(
    trainer.run(tasks, jax.random.PRNGKey(0)), args.repeats
  )

  print(
    f"rollout: {len(tasks) * args.group} episodes, {args.slots} slots, "
    f"{args.turns} turns x {args.tokens} tokens, tiny preset, Sokoban; "
    f"latency {args.latency_ms:g} ms/step; median of {args.repeats}"
  )
  header = f"{'case':<24}{'seconds':>9}{'episodes/s':>12}{'gen tok/s':>11}"
  print(header + f"{'turns/ep':>10}{'tokens/ep':>11}")
  for label, r in rows.items():
    print(
      f"{label:<24}{r['seconds']:>9.3f}{r['episodes_per_s']:>12.2f}"
      f"{r['generated_tokens_per_s']:>11.1f}{r['turns_per_episode']:>10.1f}"
      f"{r['tokens_per_episode']:>11.1f}"
    )
  print(f"latency added to serial 2x4: {added:.3f} s")
  for name, value in hidden.items():
    print(f"hidden fraction, {name:<22}{value:>7.3f}")
  print(
    f"train step: {train['rows']} x {train['padded_length']} batch, "
    f"{train['tokens']} real tokens, {train['seconds_per_step']:.3f} s/step, "
    f"{train['tokens_per_s']:.0f} tokens/s"
  )

  out = pathlib.Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  payload = {
    "benchmark": "rollout",
    "command": "python scripts/bench.py rollout " + " ".join(argv),
    "workload": vars(args) | {"max_len": MAX_LEN, "preset": "tiny"},
    "machine": {
      "platform": platform.platform(),
      "processor": platform.processor(),
      "cpus": os.cpu_count(),
      "jax_backend": jax.default_backend(),
      "jax": jax.__version__,
    },
    "rows": rows,
    "added_latency_s": added,
    "hidden_fraction": hidden,
    "train_step": train,
  }
  out.write_text(json.dumps(payload, indent=2) + "\n")
  print(f"wrote {out}")


if __name__ == "__main__":
  main(sys.argv[1:])
