"""Packing trajectories into a padded `TrajectoryBatch`."""

import numpy as np
import pytest

from agentic_rl.data import packing
from agentic_rl.types import Task, Trajectory, Turn


def _traj(group, turns):
  return Trajectory(
    task=Task(id="t", family="f"),
    group_id=group,
    turns=turns,
    outcome=float(group),
  )


def _turn(obs, act, key, reward=0.0, trained=True, score=0.0):
  return Turn(
    obs_tokens=obs,
    action_tokens=act,
    action_logp=[-0.5 * (k + 1) for k in range(len(act))],
    state_key=key,
    reward=reward,
    trained=trained,
    process_score=score,
  )


def test_pack_layout_golden():
  a = _traj(
    42,
    [_turn([5, 6], [7, 8], "s0", 0.0), _turn([9], [10], "s1", 1.0, score=0.5)],
  )
  b = _traj(42, [_turn([5, 6], [11], "s0", 0.0, trained=False)])
  c = _traj(7, [_turn([5], [12], "s0", 2.0)])
  batch = packing.pack(
    [a, b, c], length_buckets=(8, 16), turn_buckets=(2, 4), batch_size=4
  )
  assert batch.shape == (4, 8, 2)
  np.testing.assert_array_equal(batch.tokens_BxL[0], [5, 6, 7, 8, 9, 10, 0, 0])
  np.testing.assert_array_equal(
    batch.loss_mask_BxL[0], [0, 0, 1, 1, 0, 1, 0, 0]
  )
  np.testing.assert_array_equal(
    batch.turn_id_BxL[0], [0, 0, 0, 0, 1, 1, -1, -1]
  )
  np.testing.assert_allclose(
    batch.behaviour_logp_BxL[0], [0, 0, -0.5, -1.0, 0, -0.5, 0, 0]
  )
  # An untrained turn keeps its tokens but gets no loss.
  np.testing.assert_array_equal(batch.loss_mask_BxL[1], np.zeros(8))
  np.testing.assert_array_equal(
    batch.turn_reward_BxT[:3], [[0, 1], [0, 0], [2, 0]]
  )
  np.testing.assert_array_equal(
    batch.turn_mask_BxT, [[1, 1], [1, 0], [1, 0], [0, 0]]
  )
  np.testing.assert_array_equal(batch.process_score_BxT[0], [0, 0.5])
  # Dense group ids in order of appearance; the padding row is its own.
  np.testing.assert_array_equal(batch.group_id_B, [0, 0, 1, 2])
  # Same group and state -> same anchor; same state in another group -> not.
  anchor = np.asarray(batch.anchor_id_BxT)
  assert anchor[0, 0] == anchor[1, 0]
  assert anchor[2, 0] != anchor[0, 0]
  assert len({anchor[0, 1], anchor[1, 1], anchor[2, 1], anchor[0, 0]}) == 4
  assert anchor.max() < 4 * 2
  np.testing.assert_array_equal(batch.outcome_B, [42, 42, 7, 0])


def test_buckets_are_static_and_errors_are_clear():
  short = _traj(0, [_turn([1] * 3, [2] * 2, "a")])
  longer = _traj(0, [_turn([1] * 40, [2] * 20, "a")])
  assert packing.pack([short]).tokens_BxL.shape == (1, 64)
  assert packing.pack([short, longer]).tokens_BxL.shape == (2, 64)
  assert packing.bucket(65, (64, 128)) == 128
  with pytest.raises(ValueError, match="length 60 exceeds"):
    packing.pack([longer], length_buckets=(16, 32))
  with pytest.raises(ValueError, match="batch_size 1 is smaller than 2"):
    packing.pack([short, longer], batch_size=1)
  with pytest.raises(ValueError, match="at least one"):
    packing.pack([])
