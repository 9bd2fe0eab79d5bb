"""Held-out evaluation: play tasks with the current policy, report rates."""

from __future__ import annotations

import collections
from collections.abc import Sequence

import jax

from agentic_rl.rewards.trace import trace_summary
from agentic_rl.rollout.demos import NoExpertError, expert_trajectories
from agentic_rl.rollout.driver import Rollout
from agentic_rl.rollout.metrics import (
  failure_codes,
  rollout_metrics,
  tool_counts,
)
from agentic_rl.types import FailureCode, Task, Trajectory


def evaluate(
  rollout: Rollout,
  tasks: Sequence[Task],
  *,
  key: jax.Array | None = None,
  greedy: bool = True,
  group_size: int = 1,
  policy_version: int = 0,
) -> dict[str, float]:
  """Plays `tasks` (`group_size` episodes each) and returns eval metrics.

  Uses the rollout's samplers, tokenizer, environments and reward stack;
  `greedy` decodes with temperature 0. Success is the reward stack's verdict
  (`RewardStack.succeeded`: outcome >= its success threshold).

  Keys: `success_rate`, `success_rate/d<k>` (over the episodes of difficulty
  k, for each difficulty among the tasks), `return_mean` (sum of turn
  rewards), `outcome_mean`,
  `turns_per_episode`, `tokens_per_episode`, `failure_rate/<code>` (fraction
  of episodes in which the code occurred), `termination/<reason>` (counts),
  `tool_failure_rate/<name>` (fraction of the tool's calls that failed, for
  each tool called), throughput and per-tool count keys from
  `rollout_metrics`, and `trace/<key>` from `rewards.trace_summary`.
  """
  trajectories, seconds = play(
    rollout,
    tasks,
    key=key,
    greedy=greedy,
    group_size=group_size,
    policy_version=policy_version,
  )
  return eval_metrics(trajectories, rollout, seconds)


def play(
  rollout: Rollout,
  tasks: Sequence[Task],
  *,
  key: jax.Array | None = None,
  greedy: bool = True,
  group_size: int = 1,
  policy_version: int = 0,
) -> tuple[list[Trajectory], float]:
  """The scored episodes `evaluate` plays (same arguments), and their wall
  seconds: for scripts that look at the episodes themselves."""
  if not tasks:
    raise ValueError("play/evaluate needs at least one task, got none")
  changes = {"group_size": group_size}
  if greedy:
    changes["temperature"] = 0.0
  player = Rollout(
    rollout.samplers,
    rollout.tokenizer,
    rollout.env_factory,
    rollout.reward_stack,
    rollout.config.replace(**changes),
  )
  key = jax.random.PRNGKey(0) if key is None else key
  trajectories = player.run(tasks, key, policy_version)
  return trajectories, player.last_metrics.get("seconds", 0.0)


def solved_by_task(
  trajectories: Sequence[Trajectory], rollout: Rollout
) -> dict[str, bool]:
  """Task id -> whether its one episode succeeded (the reward stack's
  verdict, as in `success_rate`), for task-by-task comparisons of two
  evaluations (`report.paired_tasks`). A `ValueError` if a task was played
  more than once (group_size > 1 has no single verdict a task)."""
  solved: dict[str, bool] = {}
  for t in trajectories:
    if t.task.id in solved:
      raise ValueError(f"task {t.task.id} was played more than once")
    solved[t.task.id] = bool(rollout.reward_stack.succeeded(t))
  return solved


def eval_metrics(
  trajectories: Sequence[Trajectory], rollout: Rollout, seconds: float
) -> dict[str, float]:
  """The metrics `evaluate` reports, from scored trajectories."""
  stack = rollout.reward_stack
  n = len(trajectories)
  out = rollout_metrics(trajectories, seconds)
  out.update(
    success_rates(trajectories, [stack.succeeded(t) for t in trajectories])
  )
  out["return_mean"] = (
    sum(sum(turn.reward for turn in t.turns) for t in trajectories) / n
  )
  out["outcome_mean"] = sum(t.outcome for t in trajectories) / n
  seen = collections.Counter(
    code for t in trajectories for code in set(failure_codes(t))
  )
  for code in FailureCode:
    out[f"failure_rate/{code}"] = seen[str(code)] / n
  calls, failed = tool_counts(trajectories)
  for name, count in sorted(calls.items()):
    bad = sum(c for (tool, _), c in failed.items() if tool == name)
    out[f"tool_failure_rate/{name}"] = bad / count
  summary = trace_summary(trajectories, stack.success_threshold)
  out.update({f"trace/{k}": float(v) for k, v in summary.items()})
  return out


def expert_ceiling(rollout: Rollout, tasks: Sequence[Task]) -> dict[str, float]:
  """Success of the environment's scripted expert on `tasks` within the
  limits `rollout` plays them under: its turn budget, its context length
  (`fits_context`) and the environment's own step budget. No policy that
  plays within those limits solves a task no path solves within them, so
  for a deterministic environment with an optimal expert (Sokoban's A*)
  this is the tasks' ceiling; on a stochastic one, the expert policy's
  success on these draws (FrozenLake's value iteration, optimal in
  expectation); with a heuristic expert, a lower bound on the ceiling.
  The expert plays each task once, with the task's seed (in a
  multi-process run each process plays its part of the tasks). Keys as
  `evaluate`'s: `success_rate` and `success_rate/d<k>`; {} when the
  environment has no expert."""
  if not tasks:
    raise ValueError("expert_ceiling needs at least one task, got none")
  try:
    demos = expert_trajectories(
      tasks,
      rollout.env_factory,
      rollout.tokenizer,
      rollout.config,
      rollout.reward_stack,
      per_process=jax.process_count() > 1,
    )
  except NoExpertError:
    return {}
  limit = min(
    rollout.config.max_total_tokens, *(s.max_len for s in rollout.samplers)
  )
  solved = [
    rollout.reward_stack.succeeded(t)
    and fits_context(t, limit, rollout.config.max_new_tokens)
    for t in demos
  ]
  return success_rates(demos, solved)


def success_rates(
  trajectories: Sequence[Trajectory], solved: Sequence[bool]
) -> dict[str, float]:
  """`success_rate` over the episodes and `success_rate/d<k>` over those
  of each task difficulty k, from each episode's verdict."""
  by_difficulty = collections.defaultdict(list)
  for t, won in zip(trajectories, solved, strict=True):
    by_difficulty[t.task.difficulty].append(won)
  out = {"success_rate": sum(solved) / len(solved)}
  for d, wins in sorted(by_difficulty.items()):
    out[f"success_rate/d{d}"] = sum(wins) / len(wins)
  return out


def fits_context(
  trajectory: Trajectory, limit: int, max_new_tokens: int
) -> bool:
  """Whether `Rollout` could hold this episode's tokens: the prompt and
  each observation leave a position free below `limit`, and each action
  fits its turn budget and the context left (the driver's overflow
  rules)."""
  stream = 0
  for turn in trajectory.turns:
    stream += len(turn.obs_tokens)
    if stream >= limit:
      return False
    action = len(turn.action_tokens)
    if action > max_new_tokens or stream + action > limit:
      return False
    stream += action
  return True
