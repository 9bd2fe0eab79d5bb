"""Rejection sampling: play each task K times, keep the verified best.

The offline-shaping half of the flywheel. A policy (the RL-trained one, or
a bigger teacher) plays every task `group_size` times; the reward stack's
verifier decides what is kept:

* `keep="success"`: verified successes only (`RewardStack.succeeded`),
  best return first, then fewest tokens. Tasks no sample solved contribute
  nothing (their count is reported, not hidden).
* `keep="best"`: the highest-return samples of every task, solved or not
  (for tasks where success is rare and the shaped return still ranks).

Identical action sequences count once (`dedupe`), so one easy task cannot
fill the dataset with copies. The kept trajectories are SFT or distillation
data as they are: token ids, masks and framing are the rollout's own.
`preference_pairs` turns the same groups into DPO pairs (best success vs.
worst failure of a task).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Literal

import jax

from agentic_rl.rollout.driver import Rollout
from agentic_rl.types import Task, Trajectory

KEEP_MODES = ("success", "best")


class RejectionConfigError(ValueError):
  """A rejection-sampling setting is out of range."""


@dataclasses.dataclass(frozen=True)
class RejectionConfig:
  keep: Literal["success", "best"] = "success"
  max_per_task: int = 1
  dedupe: bool = True

  def __post_init__(self):
    if self.keep not in KEEP_MODES:
      raise RejectionConfigError(
        f"keep={self.keep!r}: expected one of {KEEP_MODES}"
      )
    if self.max_per_task < 1:
      raise RejectionConfigError(
        f"max_per_task must be >= 1: {self.max_per_task}"
      )


def episode_return(t: Trajectory) -> float:
  return float(sum(turn.reward for turn in t.turns))


def _actions(t: Trajectory) -> tuple[tuple[int, ...], ...]:
  return tuple(tuple(turn.action_tokens) for turn in t.turns)


def _groups(trajectories: Sequence[Trajectory]) -> list[list[Trajectory]]:
  """Consecutive runs of one group id (the rollout's task order)."""
  return [
    list(g) for _, g in itertools.groupby(trajectories, lambda t: t.group_id)
  ]


def _ranked(group: list[Trajectory]) -> list[Trajectory]:
  # Best return first; among equals the shortest, then rollout order.
  order = sorted(
    range(len(group)),
    key=lambda i: (-episode_return(group[i]), group[i].num_tokens, i),
  )
  return [group[i] for i in order]


def accept(
  trajectories: Sequence[Trajectory],
  succeeded: Callable[[Trajectory], bool],
  config: RejectionConfig = RejectionConfig(),
) -> tuple[list[Trajectory], dict[str, float]]:
  """The kept trajectories (group order) and the selection's statistics.

  Stats: `samples`, `tasks`, `sample_success_rate`, `pass_at_k` (tasks with
  at least one verified success), `kept`, `kept_tasks`, `duplicates`
  (dropped copies), `kept_success_rate` and `kept_return_mean`.
  """
  kept: list[Trajectory] = []
  duplicates = solved = kept_tasks = 0
  groups = _groups(trajectories)
  for group in groups:
    wins = [t for t in group if succeeded(t)]
    solved += bool(wins)
    pool = _ranked(wins if config.keep == "success" else group)
    seen: set = set()
    chosen = []
    for t in pool:
      if len(chosen) == config.max_per_task:
        break
      key = _actions(t)
      if config.dedupe and key in seen:
        duplicates += 1
        continue
      seen.add(key)
      chosen.append(t)
    kept_tasks += bool(chosen)
    kept.extend(chosen)
  n = max(len(trajectories), 1)
  stats = {
    "samples": float(len(trajectories)),
    "tasks": float(len(groups)),
    "sample_success_rate": sum(map(succeeded, trajectories)) / n,
    "pass_at_k": solved / max(len(groups), 1),
    "kept": float(len(kept)),
    "kept_tasks": float(kept_tasks),
    "duplicates": float(duplicates),
    "kept_success_rate": (
      sum(map(succeeded, kept)) / len(kept) if kept else 0.0
    ),
    "kept_return_mean": (
      sum(map(episode_return, kept)) / len(kept) if kept else 0.0
    ),
  }
  return kept, stats


def rejection_sample(
  rollout: Rollout,
  tasks: Sequence[Task],
  key: jax.Array,
  config: RejectionConfig = RejectionConfig(),
  policy_version: int = 0,
) -> tuple[list[Trajectory], list[Trajectory], dict[str, float]]:
  """Plays `rollout.config.group_size` episodes a task and selects.

  Returns (kept, all trajectories, stats); stats add the rollout's
  `seconds`. Sampling settings (temperature, top-k/p) are the rollout's.
  """
  if not tasks:
    raise RejectionConfigError("rejection sampling needs at least one task")
  trajectories = rollout.run(tasks, key, policy_version)
  kept, stats = accept(trajectories, rollout.reward_stack.succeeded, config)
  stats["seconds"] = rollout.last_metrics.get("seconds", 0.0)
  return kept, trajectories, stats


PAIR_MODES = ("success", "return")


def preference_pairs(
  trajectories: Sequence[Trajectory],
  succeeded: Callable[[Trajectory], bool],
  by: Literal["success", "return"] = "success",
) -> tuple[list[Trajectory], list[Trajectory]]:
  """(chosen, rejected) for DPO, at most one pair a task.

  `by="success"`: the best verified success against the lowest-return
  failure; tasks all solved or all failed give no pair. `by="return"`: the
  highest-return sample against the lowest, when their returns differ
  (for policies that rarely succeed). Feed the two lists to
  `train.dpo.pack_pairs`.
  """
  if by not in PAIR_MODES:
    raise RejectionConfigError(f"by={by!r}: expected one of {PAIR_MODES}")
  chosen, rejected = [], []
  for group in _groups(trajectories):
    if by == "success":
      wins = _ranked([t for t in group if succeeded(t)])
      losses = _ranked([t for t in group if not succeeded(t)])
    else:
      ranked = _ranked(group)
      same = math.isclose(
        episode_return(ranked[0]), episode_return(ranked[-1]), abs_tol=1e-9
      )
      wins, losses = ([], []) if same else (ranked[:1], ranked[1:])
    if wins and losses:
      chosen.append(wins[0])
      rejected.append(losses[-1])
  return chosen, rejected
