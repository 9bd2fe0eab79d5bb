"""Data contracts: lossless trajectory serialization and token broadcast."""

import json
import math

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_rl.types import (
  Action,
  ActionKind,
  FailureCode,
  Task,
  Termination,
  Trajectory,
  Turn,
  turns_to_tokens,
)

floats = st.floats(allow_nan=False, allow_infinity=True, width=32)
ids = st.lists(st.integers(0, 50_000), max_size=6)


@st.composite
def turns(draw):
  action_tokens = draw(ids)
  return Turn(
    obs_tokens=draw(ids),
    action_tokens=action_tokens,
    action_logp=[draw(floats) for _ in action_tokens],
    action=draw(
      st.sampled_from(
        [
          None,
          Action(ActionKind.ANSWER, text="Up"),
          Action(ActionKind.TOOL_CALL, name="book", arguments={"id": "F1"}),
          Action(ActionKind.MALFORMED, text="<x", error="unclosed"),
        ]
      )
    ),
    observation=draw(st.text(max_size=20)),
    failure=draw(st.sampled_from([None, *FailureCode])),
    reward_components={"step": draw(floats)},
    reward=draw(floats),
    process_score=draw(floats),
    state_key=draw(st.text(max_size=8)),
    trained=draw(st.booleans()),
  )


@settings(max_examples=60, deadline=None)
@given(
  st.lists(turns(), max_size=4),
  st.sampled_from(list(Termination)),
  st.text(max_size=10),
)
def test_trajectory_round_trips_losslessly(ts, termination, name):
  traj = Trajectory(
    task=Task(
      id=name,
      family="sokoban",
      difficulty=2,
      tags=("unsolvable",),
      seed=7,
      payload={"rows": ["#.#"], "n": 3},
    ),
    group_id=3,
    turns=ts,
    outcome=0.5,
    termination=termination,
    policy_version=11,
    info={"note": name},
  )
  back = Trajectory.from_json(traj.to_json())
  assert back == traj
  assert back.to_json() == traj.to_json()
  assert isinstance(back.task.tags, tuple)
  assert all(
    t.failure is None or isinstance(t.failure, FailureCode) for t in back.turns
  )


def test_float32_log_probs_survive_json_exactly():
  logp = float(np.float32(-0.1234567))
  turn = Turn(obs_tokens=[1], action_tokens=[2], action_logp=[logp])
  traj = Trajectory(task=Task(id="t", family="f"), group_id=0, turns=[turn])
  back = Trajectory.from_json(traj.to_json())
  assert back.turns[0].action_logp[0] == logp
  assert np.float32(back.turns[0].action_logp[0]) == np.float32(logp)
  inf = Trajectory(
    task=Task(id="t", family="f"), group_id=0, turns=[], outcome=math.inf
  )
  assert Trajectory.from_json(inf.to_json()).outcome == math.inf


def test_schema_version_is_checked():
  traj = Trajectory(task=Task(id="t", family="f"), group_id=0, turns=[])
  d = json.loads(traj.to_json())
  assert d["schema_version"] == 1
  d["schema_version"] = 99
  with pytest.raises(ValueError, match="schema_version 99"):
    Trajectory.from_dict(d)


def test_turn_rejects_mismatched_logp():
  with pytest.raises(ValueError, match="action_logp"):
    Turn(obs_tokens=[], action_tokens=[1, 2], action_logp=[0.0])


def test_turns_to_tokens_golden():
  values_BxT = jnp.array([[1.0, 2.0], [3.0, 4.0]])
  turn_id_BxL = jnp.array([[0, 0, 1, -1], [1, 1, -1, -1]])
  got = turns_to_tokens(values_BxT, turn_id_BxL)
  np.testing.assert_array_equal(got, [[1, 1, 2, 0], [4, 4, 0, 0]])
