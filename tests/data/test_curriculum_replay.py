"""Curriculum promotion and replay buffer: goldens, resumption, errors."""

import collections
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_rl.data.curriculum import SuccessRateCurriculum, first_promotion
from agentic_rl.data.pool import TaskPool
from agentic_rl.data.replay import ReplayBuffer
from agentic_rl.types import Task, Trajectory, Turn

# counter_env sits beside this file; how it imports depends on whether the
# test folders are packages, which this file does not control.
try:
  from counter_env import NAME
except ImportError:
  from tests.data.counter_env import NAME


def curriculum(**kw):
  kw = dict(promote_threshold=0.75, min_episodes=4, window=4) | kw
  return SuccessRateCurriculum([2, 0, 1], **kw)


def test_promotion_golden():
  c = curriculum(frontier_weight=0.6)
  assert c.frontier == 0 and c.weights() == {0: 1.0, 1: 0.0, 2: 0.0}
  promoted = [c.update(0, s) for s in (1, 1, 0)]
  assert promoted == [False] * 3  # fewer than min_episodes
  assert c.update(0, 1.0)  # 3/4 = 0.75 >= threshold
  assert c.frontier == 1 and c.promotions == [(1, 4)]
  assert c.weights() == pytest.approx({0: 0.4, 1: 0.6, 2: 0.0})
  # window 4: the last four d1 episodes decide, old failures roll out
  assert [c.update(1, s) for s in (0, 0, 1, 1)] == [False] * 4  # rate 0.5
  assert c.update(1, 1.0)  # window [0, 1, 1, 1]: 0.75
  assert c.success_rate(1) == 0.75
  assert c.frontier == 2 and c.promotions[-1] == (2, 9)
  assert c.weights() == pytest.approx({0: 0.2, 1: 0.2, 2: 0.6})
  # at the last difficulty there is nothing left to unlock
  assert not any(c.update(2, 1.0) for _ in range(8))


def test_hold_needs_the_rate_to_last():
  # threshold 0.75 over a window of 4; `hold` counts consecutive updates
  # with the frontier at or above it.
  outcomes = (1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1)
  # window rate after each: -, -, -, 1, .75, .5, .5, .5, .75, 1, 1
  eager, patient = curriculum(), curriculum(hold=3)
  assert [eager.update(0, s) for s in outcomes[:4]] == [False] * 3 + [True]
  promoted = [patient.update(0, s) for s in outcomes]
  # streaks: 1, 2 at episodes 4-5, broken at 6, then 1, 2, 3 at 9-11
  assert promoted == [False] * 10 + [True]
  assert patient.promotions == [(1, 11)] and patient.streak == 0
  # a review episode counts as an update: the streak is over episodes
  c = curriculum(hold=2, initially_unlocked=2)
  assert [c.update(1, s) for s in (1, 1, 1, 1)] == [False] * 4  # streak 1
  assert c.update(0, 0.0) and c.frontier == 2
  # checkpoints from before `hold` existed resume with no streak
  state = c.state_dict()
  del state["streak"]
  c.streak = 5
  c.load_state_dict(state)
  assert c.streak == 0


def test_first_promotion_golden():
  outcomes = [[1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1], [0] * 11]
  rule = dict(promote_threshold=0.75, min_episodes=4, window=4)
  # the streams of test_hold_needs_the_rate_to_last; the second never unlocks
  assert first_promotion(outcomes, **rule).tolist() == [4, 0]
  assert first_promotion(outcomes, **rule, hold=3).tolist() == [11, 0]
  assert first_promotion(outcomes, **rule, hold=4).tolist() == [0, 0]
  with pytest.raises(ValueError, match="0/1"):
    first_promotion([[0.5, 1.0]], **rule)


@settings(max_examples=100, deadline=None)
@given(
  st.lists(st.lists(st.booleans(), min_size=1, max_size=40), min_size=1),
  st.sampled_from([0.2, 0.5, 0.75]),
  st.integers(1, 6),
  st.integers(0, 4),
  st.integers(1, 5),
)
def test_first_promotion_matches_the_curriculum(
  rows, threshold, window, extra, hold
):
  n = max(len(r) for r in rows)
  stream_BxN = np.array([r + [False] * (n - len(r)) for r in rows], np.int64)
  min_episodes = max(1, window - extra)
  got = first_promotion(stream_BxN, threshold, min_episodes, window, hold)
  for stream, episode in zip(stream_BxN, got, strict=True):
    c = SuccessRateCurriculum(
      [0, 1], threshold, min_episodes, window, hold=hold
    )
    for s in stream:
      c.update(0, float(s))
    assert episode == (c.promotions[0][1] if c.promotions else 0)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1, 2]), st.booleans())))
def test_weights_are_a_distribution_and_state_resumes(events):
  a = curriculum(hold=2)
  half = len(events) // 2
  for d, s in events[:half]:
    a.update(d, float(s))
  b = curriculum(hold=2)
  b.load_state_dict(json.loads(json.dumps(a.state_dict())))
  for d, s in events[half:]:
    assert a.update(d, float(s)) == b.update(d, float(s))
  assert a.state_dict() == b.state_dict()
  w = a.weights()
  assert math.fsum(w.values()) == pytest.approx(1.0)
  locked = a.difficulties[a.unlocked :]
  assert all(w[d] == 0 for d in locked)


def traj(difficulty: int, outcome: float, i: int = 0) -> Trajectory:
  task = Task(id=f"t{i}", family="toy", difficulty=difficulty)
  return Trajectory(task, i, [Turn([1], [2], [-0.1])], outcome=outcome)


def test_curriculum_drives_the_sampler():
  pool = TaskPool.from_envs(
    [dict(env=NAME, difficulties=[0, 1, 2], counts=[5, 5, 5])]
  )
  c = curriculum()
  sampler = pool.sampler(0, difficulty_weights=c.weights())
  assert {t.difficulty for t in sampler.sample(50)} == {0}
  promoted = c.update_from_trajectories(traj(0, 1.0, i) for i in range(4))
  assert promoted == 1
  sampler.set_difficulty_weights(c.weights())
  drawn = collections.Counter(t.difficulty for t in sampler.sample(2000))
  assert set(drawn) == {0, 1}
  assert drawn[1] / 2000 == pytest.approx(0.7, abs=0.04)


def test_curriculum_errors():
  with pytest.raises(ValueError, match="distinct"):
    SuccessRateCurriculum([0, 0])
  with pytest.raises(ValueError, match="min_episodes"):
    SuccessRateCurriculum([0], min_episodes=10, window=5)
  with pytest.raises(ValueError, match="hold"):
    SuccessRateCurriculum([0], hold=0)
  c = curriculum()
  with pytest.raises(KeyError, match="not in the curriculum"):
    c.update(7, 1.0)
  with pytest.raises(ValueError, match="success"):
    c.update(0, 2.0)
  with pytest.raises(ValueError, match="difficulties"):
    SuccessRateCurriculum([0, 1]).load_state_dict(c.state_dict())


def ids(trajs):
  return [t.group_id for t in trajs]


def test_fifo_evicts_oldest_and_samples_uniformly():
  buf = ReplayBuffer(capacity=3, rng=0)
  buf.add([traj(0, 0.0, i) for i in range(5)])
  assert ids(buf.trajectories) == [2, 3, 4] and buf.num_added == 5
  counts = collections.Counter(ids(buf.sample(3000)))
  assert all(abs(counts[i] / 3000 - 1 / 3) < 0.04 for i in (2, 3, 4))


def test_replay_refuses_non_finite_priority_settings():
  for alpha, eps in ((math.nan, 1e-3), (math.inf, 1e-3), (1.0, math.nan)):
    with pytest.raises(ValueError, match="need alpha >= 0 and eps > 0"):
      ReplayBuffer(4, mode="prioritized", alpha=alpha, eps=eps)


def test_priorities_golden():
  buf = ReplayBuffer(10, mode="prioritized", alpha=2.0, half_life=2.0, eps=0.5)
  buf.add([traj(0, 0.0, i) for i in range(3)], advantages=[0.0, 1.5, -0.5])
  # (|a| + 0.5) ** 2 * 0.5 ** (age / 2), ages 3, 2, 1
  expected = [0.25 * 0.5**1.5, 4.0 * 0.5, 1.0 * 0.5**0.5]
  np.testing.assert_allclose(buf.priorities(), expected)
  counts = collections.Counter(ids(buf.sample(6000)))
  total = sum(expected)
  for i, p in enumerate(expected):
    assert counts[i] / 6000 == pytest.approx(p / total, abs=0.03)


def test_prioritized_evicts_lowest_priority_oldest_first():
  buf = ReplayBuffer(3, mode="prioritized", rng=1)
  buf.add([traj(0, 0.0, i) for i in range(3)], advantages=[0.2, 2.0, 0.2])
  buf.add([traj(0, 0.0, 3)], advantages=[1.0])
  assert ids(buf.trajectories) == [1, 2, 3]
  buf.add([traj(0, 0.0, 4)], advantages=[3.0])
  assert ids(buf.trajectories) == [1, 3, 4]


def test_replay_state_round_trip_resumes_sampling():
  a = ReplayBuffer(4, mode="prioritized", half_life=3.0, rng=5)
  a.add([traj(i % 2, math.nan, i) for i in range(6)], [0.1, 1, 2, 3, 4, 5])
  a.sample(7)
  state = json.loads(json.dumps(a.state_dict()))
  b = ReplayBuffer(4, mode="prioritized", half_life=3.0, rng=99)
  b.load_state_dict(state)
  assert [t.to_json() for t in b.trajectories] == [
    t.to_json() for t in a.trajectories
  ]
  assert ids(a.sample(20)) == ids(b.sample(20))
  np.testing.assert_array_equal(a.priorities(), b.priorities())


def test_payloads_stay_with_their_trajectories():
  """Through eviction, sampling and a JSON round trip (the RL loop keeps
  per-turn advantages there)."""
  a = ReplayBuffer(3, mode="prioritized", rng=2)
  a.add(
    [traj(0, 0.0, i) for i in range(4)],
    [0.5, 0.1, 2.0, 1.0],
    payloads=[[float(i), -1.0] for i in range(4)],
  )
  assert ids(a.trajectories) == [0, 2, 3]  # the lowest priority (1) left
  for t, payload in a.sample_items(12):
    assert payload == [float(ids([t])[0]), -1.0]
  b = ReplayBuffer(3, mode="prioritized", rng=7)
  b.load_state_dict(json.loads(json.dumps(a.state_dict())))
  assert [(ids([t])[0], p) for t, p in b.sample_items(9)] == [
    (ids([t])[0], p) for t, p in a.sample_items(9)
  ]
  with pytest.raises(ValueError, match="payloads"):
    a.add([traj(0, 0.0, 9)], [1.0], payloads=[])


def test_replay_errors():
  with pytest.raises(ValueError, match="capacity"):
    ReplayBuffer(0)
  with pytest.raises(ValueError, match="mode"):
    ReplayBuffer(2, mode="lifo")
  with pytest.raises(ValueError, match="empty"):
    ReplayBuffer(2).sample(1)
  buf = ReplayBuffer(2, mode="prioritized")
  with pytest.raises(ValueError, match="advantage"):
    buf.add([traj(0, 0.0)])
  with pytest.raises(ValueError, match="not finite"):
    buf.add([traj(0, 0.0)], [math.nan])
  with pytest.raises(ValueError, match="2 advantages for 1"):
    buf.add([traj(0, 0.0)], [1.0, 2.0])
  with pytest.raises(ValueError, match="config"):
    ReplayBuffer(3).load_state_dict(buf.state_dict())
