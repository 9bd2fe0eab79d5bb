"""Host environment throughput: `python scripts/bench.py envs [flags]`.

Steps per second of each built-in environment on one CPU core (the process
is pinned to a single core where the OS allows). Tasks and the actions to
play are prepared before timing; the clock runs around `step` calls only
(`step/s`) and around `reset` plus `step` (`with reset/s`), so generation
and expert planning are excluded.

Policies: `random` draws uniformly from the environment's move names (grid
environments, episodes run to their step limit or a terminal state);
`expert` replays the scripted expert's actions for each task. Environments
that are not importable yet are skipped.

Flags: --seconds S (time per row, default 2), --only a,b (labels),
--out PATH (default experiments/benchmarks/envs.json).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agentic_rl import envs  # noqa: E402
from agentic_rl.envs import frozenlake, sokoban  # noqa: E402


@dataclasses.dataclass(frozen=True)
class Case:
  label: str
  env: str
  options: dict[str, Any]
  policy: str  # "random" or "expert"
  difficulty: int = 0
  moves: tuple[str, ...] = ()  # move names for the random policy


CASES = (
  Case("sokoban", "sokoban", {}, "random", 2, sokoban.MOVES),
  Case("sokoban", "sokoban", {}, "expert", 2),
  Case("sokoban x4", "sokoban", {"max_actions_per_turn": 4}, "expert", 3),
  Case("frozenlake", "frozenlake", {}, "random", 3, frozenlake.MOVES),
  Case(
    "frozenlake slip",
    "frozenlake",
    {"slippery": True, "max_steps": 200},
    "random",
    3,
    frozenlake.MOVES,
  ),
  Case("frozenlake", "frozenlake", {}, "expert", 3),
  Case("rg chain_sum", "reasoning_gym", {"family": "chain_sum"}, "expert"),
  Case(
    "rg leg_counting",
    "reasoning_gym",
    {"family": "leg_counting", "max_attempts": 2},
    "expert",
  ),
  Case("search_qa", "search_qa", {}, "expert"),
  Case("flights", "flights", {}, "expert"),
  Case("code_repair", "code_repair", {}, "expert"),
)


def pin_to_one_core() -> str:
  """Pins this process to one CPU so the number is per core."""
  if not hasattr(os, "sched_setaffinity"):
    return "unpinned"
  core = min(os.sched_getaffinity(0))
  os.sched_setaffinity(0, {core})
  return f"cpu{core}"


def expert_for(env: envs.Environment) -> Callable[[Any], list[str]]:
  """The env's `expert_actions` method, else its module's function."""
  method = getattr(env, "expert_actions", None)
  if method is not None:
    return method
  return sys.modules[type(env).__module__].expert_actions


def episode_plans(
  env: envs.Environment, case: Case, n: int
) -> list[tuple[Any, Callable[[int], str] | list[str]]]:
  """(task, actions) for n tasks; random plans draw moves lazily."""
  plans = []
  rng = np.random.default_rng(0)
  expert = expert_for(env) if case.policy == "expert" else None
  for seed in range(n):
    task = env.generate_task(seed, case.difficulty)
    if case.policy == "expert":
      plans.append((task, expert(task)))
    else:
      texts = [f"<answer>{m}</answer>" for m in case.moves]
      draws = rng.integers(len(texts), size=4096).tolist()
      plans.append((task, [texts[i] for i in draws]))
  return plans


def run_case(case: Case, seconds: float) -> dict[str, Any]:
  env = envs.make(case.env, **case.options)
  plans = episode_plans(env, case, n=8 if case.policy == "expert" else 4)
  steps = episodes = 0
  step_time = total_time = 0.0
  clock = time.perf_counter
  while total_time < seconds:
    task, actions = plans[episodes % len(plans)]
    t0 = clock()
    env.reset(task, seed=episodes)
    for text in actions:
      a = clock()
      result = env.step(text)
      step_time += clock() - a
      steps += 1
      if result.done:
        break
    total_time += clock() - t0
    episodes += 1
  env.close()
  return {
    "label": case.label,
    "env": case.env,
    "options": case.options,
    "policy": case.policy,
    "difficulty": case.difficulty,
    "episodes": episodes,
    "steps": steps,
    "steps_per_s": steps / step_time,
    "steps_per_s_with_reset": steps / total_time,
    "us_per_step": 1e6 * step_time / steps,
  }


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(prog="bench.py envs")
  parser.add_argument("--seconds", type=float, default=2.0)
  parser.add_argument("--only", default="", help="comma-separated labels")
  parser.add_argument(
    "--out", default=str(ROOT / "experiments/benchmarks/envs.json")
  )
  args = parser.parse_args(argv)
  only = {s.strip() for s in args.only.split(",") if s.strip()}
  core = pin_to_one_core()
  rows, skipped = [], []
  for case in CASES:
    if only and case.label not in only:
      continue
    try:
      rows.append(run_case(case, args.seconds))
    except (KeyError, ImportError, AttributeError) as e:
      skipped.append({"label": case.label, "reason": repr(e)})
  header = (
    f"{'env':<16} {'policy':<7} {'diff':>4} {'episodes':>8} {'steps':>8}"
    f" {'step/s':>10} {'with reset/s':>12} {'us/step':>8}"
  )
  print(header)
  print("-" * len(header))
  for r in rows:
    print(
      f"{r['label']:<16} {r['policy']:<7} {r['difficulty']:>4}"
      f" {r['episodes']:>8} {r['steps']:>8} {r['steps_per_s']:>10.0f}"
      f" {r['steps_per_s_with_reset']:>12.0f} {r['us_per_step']:>8.1f}"
    )
  for s in skipped:
    print(f"skipped {s['label']}: {s['reason']}")
  out = pathlib.Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  record = {
    "benchmark": "envs",
    "command": "python scripts/bench.py envs " + " ".join(argv),
    "machine": {
      "platform": platform.platform(),
      "processor": platform.processor(),
      "python": platform.python_version(),
      "cpu_count": os.cpu_count(),
      "pinned": core,
    },
    "seconds_per_row": args.seconds,
    "rows": rows,
    "skipped": skipped,
  }
  out.write_text(json.dumps(record, indent=2) + "\n")
  print(f"wrote {out}")


if __name__ == "__main__":
  main(sys.argv[1:])
