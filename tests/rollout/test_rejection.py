"""Rejection sampling and preference pairs from groups of rollouts."""

from __future__ import annotations

import jax
import pytest

from agentic_rl import models
from agentic_rl.models import build_env_tokenizer
from agentic_rl.rewards import RewardStack
from agentic_rl.rollout import Rollout, RolloutConfig
from agentic_rl.rollout import rejection as rj
from agentic_rl.sampling import Sampler
from agentic_rl.types import Task, Trajectory, Turn

try:
  from tests.rollout.echo_env import Echo
except ImportError:  # tests/ run without package __init__ files
  from echo_env import Echo


def traj(group: int, actions: list[list[int]], rewards, outcome: float):
  turns = [
    Turn(obs_tokens=[1], action_tokens=a, action_logp=[0.0] * len(a), reward=r)
    for a, r in zip(actions, rewards, strict=True)
  ]
  task = Task(id=f"task{group}", family="toy")
  return Trajectory(task=task, group_id=group, turns=turns, outcome=outcome)


def won(t: Trajectory) -> bool:
  return t.outcome >= 1.0


def groups():
  """Task 0: two successes (one a longer copy-free path), one duplicate of
  the best, one failure. Task 1: failures only. Task 2: one success."""
  best = traj(0, [[5], [6]], [-0.1, 1.0], 1.0)
  return [
    traj(0, [[7], [8], [9]], [-0.1, -0.1, 1.0], 1.0),
    best,
    traj(0, [[5], [6]], [-0.1, 1.0], 1.0),  # same actions as `best`
    traj(0, [[4]], [-0.5], 0.0),
    traj(1, [[4]], [-0.1], 0.0),
    traj(1, [[3], [3]], [-0.1, -0.6], 0.0),
    traj(2, [[2]], [1.0], 1.0),
    traj(2, [[2, 2]], [-1.0], 0.0),
  ], best


def test_success_mode_keeps_the_best_verified_and_drops_copies():
  trajectories, best = groups()
  kept, stats = rj.accept(trajectories, won, rj.RejectionConfig(max_per_task=2))
  # task 0: best return first (0.9, its copy dropped), then the longer win
  assert kept[0] is best
  assert [t.group_id for t in kept] == [0, 0, 2]
  assert kept[1].turns[0].action_tokens == [7]
  assert stats["duplicates"] == 1.0
  assert stats["pass_at_k"] == pytest.approx(2 / 3)
  assert stats["sample_success_rate"] == pytest.approx(4 / 8)
  assert stats["kept_tasks"] == 2.0 and stats["kept_success_rate"] == 1.0
  one, _ = rj.accept(trajectories, won, rj.RejectionConfig(max_per_task=1))
  assert [t.group_id for t in one] == [0, 2] and one[0] is best


def test_best_mode_keeps_every_task_including_failures():
  trajectories, best = groups()
  kept, stats = rj.accept(trajectories, won, rj.RejectionConfig(keep="best"))
  assert kept[0] is best
  assert [t.group_id for t in kept] == [0, 1, 2]
  assert kept[1].turns[0].action_tokens == [4]  # -0.1 beats -0.7
  assert stats["kept_success_rate"] == pytest.approx(2 / 3)
  assert stats["kept_return_mean"] == pytest.approx((0.9 - 0.1 + 1.0) / 3)


def test_without_dedupe_copies_count():
  trajectories, best = groups()
  kept, stats = rj.accept(
    trajectories, won, rj.RejectionConfig(max_per_task=2, dedupe=False)
  )
  assert kept[0] is best and kept[1] is trajectories[2]
  assert stats["duplicates"] == 0.0


def test_preference_pairs_best_success_against_worst_failure():
  trajectories, best = groups()
  chosen, rejected = rj.preference_pairs(trajectories, won)
  assert chosen == [best, trajectories[6]]
  assert rejected == [trajectories[3], trajectories[7]]


def test_preference_pairs_by_return_ignore_ties():
  trajectories, best = groups()
  chosen, rejected = rj.preference_pairs(trajectories, won, by="return")
  # task 0: 0.9 vs -0.5; task 1: -0.1 vs -0.7; task 2: 1.0 vs -1.0
  assert chosen == [best, trajectories[4], trajectories[6]]
  assert rejected == [trajectories[3], trajectories[5], trajectories[7]]
  tie = [traj(5, [[1]], [0.5], 0.0), traj(5, [[2]], [0.5], 0.0)]
  assert rj.preference_pairs(tie, won, by="return") == ([], [])
  with pytest.raises(rj.RejectionConfigError, match="by="):
    rj.preference_pairs(tie, won, by="outcome")


def test_config_errors():
  with pytest.raises(rj.RejectionConfigError, match="keep"):
    rj.RejectionConfig(keep="all")
  with pytest.raises(rj.RejectionConfigError, match="max_per_task"):
    rj.RejectionConfig(max_per_task=0)


def test_rejection_sampling_a_real_rollout_is_verified_and_reproducible():
  # Echo succeeds when the last action text has odd length.
  tokenizer = build_env_tokenizer()
  sampler = Sampler(
    models.build("tiny", 0),
    num_slots=8,
    max_len=128,
    chunk_buckets=(32, 64, 128),
    budget_buckets=(4, 8),
  )
  config = RolloutConfig(
    group_size=2, max_turns=2, max_new_tokens=4, max_total_tokens=128
  )
  rollout = Rollout(
    sampler, tokenizer, lambda t: Echo(episode_len=2), RewardStack(), config
  )
  tasks = [Echo().generate_task(seed) for seed in range(8)]
  runs = []
  for _ in range(2):
    kept, everything, stats = rj.rejection_sample(
      rollout, tasks, jax.random.PRNGKey(3), rj.RejectionConfig()
    )
    runs.append([t.to_dict() for t in kept])
    assert len(everything) == 16 and stats["samples"] == 16
    assert all(rollout.reward_stack.succeeded(t) for t in kept)
    assert len({t.task.id for t in kept}) == len(kept)  # one per task
    wins = rollout.reward_stack.succeeded
    solved = {t.task.id for t in everything if wins(t)}
    assert {t.task.id for t in kept} == solved
    assert stats["pass_at_k"] == len(solved) / 8
  assert 0 < len(runs[0]) < 8  # some tasks solved, not all
  for a, b in zip(*runs, strict=True):  # group ids differ; the rest not
    a.pop("group_id"), b.pop("group_id")
  assert runs[0] == runs[1]
  with pytest.raises(rj.RejectionConfigError, match="at least one task"):
    rj.rejection_sample(rollout, [], jax.random.PRNGKey(0))
