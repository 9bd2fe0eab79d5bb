"""Trajectory JSON lines: lossless round trips, including NaN and unicode."""

import gzip
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentic_rl.data import trajectory_io
from agentic_rl.types import (
  Action,
  ActionKind,
  FailureCode,
  Task,
  Termination,
  Trajectory,
  Turn,
)

json_scalars = (
  st.none()
  | st.booleans()
  | st.integers(-(2**70), 2**70)
  | st.floats(allow_nan=True, allow_infinity=True)
  | st.text(max_size=12)
)
json_values = st.recursive(
  json_scalars,
  lambda inner: (
    st.lists(inner, max_size=3)
    | st.dictionaries(st.text(max_size=6), inner, max_size=3)
  ),
  max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=3)
any_float = st.floats(allow_nan=True, allow_infinity=True)

tasks = st.builds(
  Task,
  id=st.text(max_size=10),
  family=st.text(max_size=8),
  split=st.sampled_from(["train", "validation", "test"]),
  difficulty=st.integers(0, 10),
  tags=st.lists(st.text(max_size=8), max_size=3).map(tuple),
  seed=st.integers(0, 2**62),
  payload=json_objects,
)
actions = st.none() | st.builds(
  Action,
  kind=st.sampled_from(list(ActionKind)),
  name=st.text(max_size=8),
  arguments=json_objects,
  text=st.text(max_size=20),
  error=st.text(max_size=8),
)


@st.composite
def turns(draw):
  n = draw(st.integers(0, 4))
  return Turn(
    obs_tokens=draw(st.lists(st.integers(0, 2**31 - 1), max_size=5)),
    action_tokens=draw(
      st.lists(st.integers(0, 2**31 - 1), min_size=n, max_size=n)
    ),
    action_logp=draw(st.lists(any_float, min_size=n, max_size=n)),
    action=draw(actions),
    observation=draw(st.text(max_size=20)),
    failure=draw(st.none() | st.sampled_from(list(FailureCode))),
    reward_components=draw(st.dictionaries(st.text(max_size=6), any_float)),
    reward=draw(any_float),
    process_score=draw(any_float),
    state_key=draw(st.text(max_size=8)),
    trained=draw(st.booleans()),
  )


trajectories = st.builds(
  Trajectory,
  task=tasks,
  group_id=st.integers(0, 2**40),
  turns=st.lists(turns(), max_size=3),
  outcome=any_float,
  termination=st.sampled_from(list(Termination)),
  policy_version=st.integers(0, 10**6),
  info=json_objects,
)


def canonical(x):
  """Structure with NaN replaced by a marker, so == compares exactly."""
  if isinstance(x, float):
    if math.isnan(x):
      return ("nan",)
    return ("float", x, math.copysign(1.0, x))
  if isinstance(x, dict):
    return {k: canonical(v) for k, v in x.items()}
  if isinstance(x, list | tuple):
    return [type(x).__name__, [canonical(v) for v in x]]
  return (type(x).__name__, x)


@settings(
  max_examples=60,
  deadline=None,
  suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(trajs=st.lists(trajectories, max_size=4), gz=st.booleans())
def test_round_trip_is_lossless(tmp_path, trajs, gz):
  path = tmp_path / ("t.jsonl.gz" if gz else "t.jsonl")
  assert trajectory_io.write_jsonl(path, trajs) == len(trajs)
  back = trajectory_io.read_jsonl(path)
  assert len(back) == len(trajs)
  for a, b in zip(trajs, back, strict=True):
    assert b.to_json() == a.to_json()
    assert canonical(b.to_dict()) == canonical(a.to_dict())
    assert isinstance(b.task.tags, tuple)
    assert all(isinstance(t.failure, FailureCode | None) for t in b.turns)


def example(i: int) -> Trajectory:
  task = Task(id=f"t{i}", family="ünï", payload={"q": "a\u2028b\nc"})
  turn = Turn([1], [2, 3], [-0.5, math.nan], state_key="\u0000")
  return Trajectory(task, i, [turn], outcome=math.inf)


def test_append_gzip_and_blank_lines(tmp_path):
  path = tmp_path / "a.jsonl.gz"
  trajectory_io.write_jsonl(path, [example(0)])
  trajectory_io.write_jsonl(path, [example(1), example(2)], append=True)
  with gzip.open(path, "at", encoding="utf-8") as f:
    f.write("\n  \n")
  assert [t.group_id for t in trajectory_io.iter_jsonl(path)] == [0, 1, 2]
  back = trajectory_io.read_jsonl(path)[0]
  assert back.task.payload["q"] == "a\u2028b\nc"
  assert math.isnan(back.turns[0].action_logp[1]) and back.outcome == math.inf


def test_overwrite_replaces_and_leaves_no_temp_file(tmp_path):
  path = tmp_path / "t.jsonl"
  trajectory_io.write_jsonl(path, [example(0), example(1)])
  trajectory_io.write_jsonl(path, [example(5)])
  assert [t.group_id for t in trajectory_io.read_jsonl(path)] == [5]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


def test_empty_file(tmp_path):
  path = tmp_path / "e.jsonl"
  assert trajectory_io.write_jsonl(path, []) == 0
  assert trajectory_io.read_jsonl(path) == []


@pytest.mark.parametrize(
  "line, match",
  [
    ("{not json", "JSONDecodeError"),
    ('{"schema_version": 999}', "schema_version"),
    ('{"schema_version": 1, "task": {}}', "KeyError|TypeError"),
    ("[1, 2]", "TypeError|AttributeError"),
  ],
)
def test_bad_lines_name_file_and_line(tmp_path, line, match):
  path = tmp_path / "bad.jsonl"
  path.write_text(example(0).to_json() + "\n" + line + "\n")
  with pytest.raises(trajectory_io.TrajectoryFileError, match=r"bad.jsonl:2"):
    trajectory_io.read_jsonl(path)
  with pytest.raises(trajectory_io.TrajectoryFileError, match=match):
    trajectory_io.read_jsonl(path)
