"""Group metrics of a rollout batch, by hand."""

import pytest

from agentic_rl.rollout import group_metrics
from agentic_rl.rollout.metrics import episode_return
from agentic_rl.types import Task, Trajectory, Turn


def _episode(group, difficulty, outcome, rewards):
  task = Task(id=f"t{group}", family="toy", difficulty=difficulty)
  turns = [Turn([1], [2], [0.0], reward=r) for r in rewards]
  return Trajectory(task, group, turns, outcome=outcome)


def _solved(t):
  return t.outcome >= 1.0


def test_group_metrics_by_hand():
  batch = [
    # group 0, d0: one solved, one not; returns 1.5 and 0.5.
    _episode(0, 0, 1.0, [0.5, 1.0]),
    _episode(0, 0, 0.0, [0.5]),
    # group 1, d0: both solved, equal outcomes, returns 1.0 and 1.2.
    _episode(1, 0, 1.0, [1.0]),
    _episode(1, 0, 1.0, [0.2, 1.0]),
    # group 2, d1: both failed, returns -0.1 each (the same turns' sum in
    # a different order).
    _episode(2, 1, 0.0, [0.1, -0.2]),
    _episode(2, 1, 0.0, [-0.2, 0.1]),
    # group 3, d1: one episode, compared with nothing; not counted.
    _episode(3, 1, 1.0, [1.0]),
  ]
  assert episode_return(batch[0]) == 1.5
  got = group_metrics(batch, _solved)
  assert got == pytest.approx(
    {
      "groups/mixed_success": 1 / 3,
      "groups/all_success": 1 / 3,
      "groups/all_failure": 1 / 3,
      "groups/equal_outcomes": 2 / 3,  # groups 1 and 2
      "groups/equal_returns": 1 / 3,  # group 2 only
      "groups/mixed_success/d0": 1 / 2,
      "groups/mixed_success/d1": 0.0,
    }
  )
  # Only singletons: nothing compared, every fraction 0, no per-difficulty
  # key (no group of difficulty 1 was compared).
  alone = group_metrics([batch[-1]], _solved)
  assert set(alone.values()) == {0.0}
  assert "groups/mixed_success/d1" not in alone
