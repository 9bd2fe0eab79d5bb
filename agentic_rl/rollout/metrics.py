"""Per-batch rollout metrics: throughput, lengths, failures, terminations."""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence

from agentic_rl.types import (
  ActionKind,
  FailureCode,
  Termination,
  Trajectory,
  Turn,
)

# The metric name of calls to a tool the environment does not have: the
# policy wrote the name, and metric keys stay a closed set.
UNKNOWN_TOOL_NAME = "_unknown"


def failure_codes(trajectory: Trajectory) -> list[str]:
  """Every failure code of a trajectory: per turn, then the episode's own.

  An episode-level failure (`info["failure"]`: a prompt or observation that
  overflowed the context, a crashed reset) is listed unless a turn already
  carries that code as the episode's last turn.
  """
  codes = [str(t.failure) for t in trajectory.turns if t.failure is not None]
  episode = trajectory.info.get("failure")
  last = trajectory.turns[-1].failure if trajectory.turns else None
  if episode is not None and (last is None or str(last) != episode):
    codes.append(str(episode))
  return codes


def called_tool(turn: Turn) -> str | None:
  """The tool a turn called, for metrics; None if it called none.

  A parsed call to a tool the environment lacks is `UNKNOWN_TOOL_NAME`.
  A malformed call names no tool (it is a `malformed_call` failure), and
  an action cut by the context budget (`context_overflow`) never reached the
  environment, whatever it names.
  """
  if turn.action is None or turn.action.kind != ActionKind.TOOL_CALL:
    return None
  if turn.failure == FailureCode.CONTEXT_OVERFLOW:
    return None
  if turn.failure == FailureCode.UNKNOWN_TOOL:
    return UNKNOWN_TOOL_NAME
  return turn.action.name


def tool_counts(
  trajectories: Sequence[Trajectory],
) -> tuple[collections.Counter, collections.Counter]:
  """Calls per tool, and failed calls per (tool, failure code)."""
  calls, failed = collections.Counter(), collections.Counter()
  for trajectory in trajectories:
    for turn in trajectory.turns:
      name = called_tool(turn)
      if name is None:
        continue
      calls[name] += 1
      if turn.failure is not None:
        failed[name, str(turn.failure)] += 1
  return calls, failed


def generated_tokens(trajectory: Trajectory) -> int:
  return sum(len(t.action_tokens) for t in trajectory.turns)


def rollout_metrics(
  trajectories: Sequence[Trajectory], seconds: float
) -> dict[str, float]:
  """Flat metrics of one batch, for a `MetricWriter`.

  Keys: `episodes`, `seconds`, `episodes_per_s`, `generated_tokens`,
  `generated_tokens_per_s`, `turns_per_episode`, `tokens_per_episode`
  (prompt, actions and observations), `generated_tokens_per_episode`,
  `failure/<code>` (counts, every code present), `termination/<reason>`
  (counts, every reason present), and per tool called in the batch
  `tool/<name>/calls` and `tool/<name>/<code>` (counts of its calls, and of
  those that failed with the code; codes that occurred).
  """
  n = len(trajectories)
  seconds = max(seconds, 1e-9)
  generated = sum(generated_tokens(t) for t in trajectories)
  out: dict[str, float] = {
    "episodes": float(n),
    "seconds": float(seconds),
    "episodes_per_s": n / seconds,
    "generated_tokens": float(generated),
    "generated_tokens_per_s": generated / seconds,
    "turns_per_episode": _mean([len(t.turns) for t in trajectories]),
    "tokens_per_episode": _mean([t.num_tokens for t in trajectories]),
    "generated_tokens_per_episode": generated / max(n, 1),
  }
  failures = collections.Counter(
    code for t in trajectories for code in failure_codes(t)
  )
  terminations = collections.Counter(str(t.termination) for t in trajectories)
  for code in FailureCode:
    out[f"failure/{code}"] = float(failures[str(code)])
  for reason in Termination:
    out[f"termination/{reason}"] = float(terminations[str(reason)])
  calls, failed = tool_counts(trajectories)
  for name, count in sorted(calls.items()):
    out[f"tool/{name}/calls"] = float(count)
  for (name, code), count in sorted(failed.items()):
    out[f"tool/{name}/{code}"] = float(count)
  return out


def _mean(values: Sequence[float]) -> float:
  return float(sum(values) / len(values)) if values else 0.0


def episode_return(trajectory: Trajectory) -> float:
  """The sum of a trajectory's turn rewards."""
  return float(sum(t.reward for t in trajectory.turns))


def by_group(trajectories: Sequence[Trajectory]) -> dict[int, list[Trajectory]]:
  """The trajectories by `group_id` (the episodes of one task), groups in
  the order of their first trajectory, members in order."""
  groups: dict[int, list[Trajectory]] = {}
  for t in trajectories:
    groups.setdefault(t.group_id, []).append(t)
  return groups


def group_metrics(
  trajectories: Sequence[Trajectory],
  succeeded: Callable[[Trajectory], bool],
) -> dict[str, float]:
  """How much a batch's groups (the episodes of one task, `group_id`) can
  teach a group-relative estimator, as fractions of its groups.

  Keys: `groups/mixed_success` (some episodes succeeded, some did not),
  `groups/all_success`, `groups/all_failure`, `groups/equal_outcomes`
  (every episode's `outcome` the same to 1e-6: GRPO and RLOO on the
  outcome give each of its turns an advantage of exactly 0, so the group
  adds nothing to their policy gradient), `groups/equal_returns` (the same
  for the sum of turn rewards: the episode-level part of GiGPO or of
  `score="return"` is 0; per-turn credit may still differ), and
  `groups/mixed_success/d<k>` over the groups of difficulty k, for each
  difficulty in the batch. The fractions are of the groups of more than
  one episode (a singleton has nothing to be compared with); 0 without
  any.
  """
  compared = [g for g in by_group(trajectories).values() if len(g) > 1]
  n = max(len(compared), 1)
  wins = [[bool(succeeded(t)) for t in g] for g in compared]
  mixed = [any(w) and not all(w) for w in wins]
  returns = [[episode_return(t) for t in g] for g in compared]
  outcomes = [[float(t.outcome) for t in g] for g in compared]
  out = {
    "groups/mixed_success": sum(mixed) / n,
    "groups/all_success": sum(all(w) for w in wins) / n,
    "groups/all_failure": sum(not any(w) for w in wins) / n,
    "groups/equal_outcomes": sum(map(all_alike, outcomes)) / n,
    "groups/equal_returns": sum(map(all_alike, returns)) / n,
  }
  by_difficulty = collections.defaultdict(list)
  for g, m in zip(compared, mixed, strict=True):
    by_difficulty[g[0].task.difficulty].append(m)
  for d, ms in sorted(by_difficulty.items()):
    out[f"groups/mixed_success/d{d}"] = sum(ms) / len(ms)
  return out


def all_alike(values: Sequence[float]) -> bool:
  """Whether the values are equal to 1e-6 (a group with nothing to rank)."""
  return max(values) - min(values) <= 1e-6
