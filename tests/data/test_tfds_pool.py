"""TFDS array_record materialization of task pools, without TensorFlow."""

import importlib.util
import json
import math
import sys
import tempfile

import pytest
import tensorflow_datasets as tfds
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_rl.data import tfds_pool
from agentic_rl.data.pool import TaskPool
from agentic_rl.types import Task

# counter_env sits beside this file; how it imports depends on whether the
# test folders are packages, which this file does not control.
try:
  from counter_env import NAME
except ImportError:
  from tests.data.counter_env import NAME


def dump(pool: TaskPool) -> list[str]:
  # JSON text compares NaN payload values exactly, unlike Task.__eq__.
  return [json.dumps(t.to_dict(), sort_keys=True) for t in pool]


def odd_pool() -> TaskPool:
  return TaskPool(
    [
      Task(
        id="ünï/0",
        family="fam∑",
        split="test",
        difficulty=3,
        tags=(),
        seed=2**62,
        payload={"x": [math.nan, -math.inf, 1e-300], "s": "a\u2028\x00b"},
      ),
      Task(id="b", family="f", tags=("out_of_scope", "unsafe"), payload={}),
    ]
  )


def test_round_trip_preserves_tasks_and_order(tmp_path):
  pool = TaskPool.from_envs(
    [
      dict(env=NAME, difficulties=[0, 1], counts=[4, 3], negative_rate=0.4),
      dict(env=NAME, difficulties=[2], counts=[2], split="validation"),
    ]
  )
  path = tfds_pool.write_pool(pool, str(tmp_path), name="counter")
  assert path == tfds_pool.dataset_dir(str(tmp_path), "counter")
  back = tfds_pool.load_pool(path)
  assert back == pool and back.fingerprint() == pool.fingerprint()
  assert tfds_pool.load_pool(path, splits=["validation"]) == pool.split(
    "validation"
  )
  shards = sorted(p.name for p in (tmp_path / path).glob("*array_record*"))
  assert shards == [
    "agentic_rl_task_pool-train.array_record-00000-of-00001",
    "agentic_rl_task_pool-validation.array_record-00000-of-00001",
  ]
  # The same files through tfds's own entry point, by registered name.
  source = tfds.data_source("agentic_rl_task_pool/counter", data_dir=tmp_path)
  assert len(source["train"]) == len(pool.split("train"))
  assert importlib.util.find_spec("tensorflow") is None
  assert "tensorflow" not in sys.modules


def test_writing_and_reading_leave_no_temporary_directory(
  tmp_path, monkeypatch
):
  # tfds's bucket lookup used to leave an empty tmp*tfds per write_pool.
  scratch = tmp_path / "tmp"
  scratch.mkdir()
  monkeypatch.setattr(tempfile, "tempdir", str(scratch))
  path = tfds_pool.write_pool(odd_pool(), str(tmp_path / "data"), "odd")
  tfds_pool.load_pool(path)
  assert list(scratch.iterdir()) == []


def test_unicode_nan_and_big_ints_survive(tmp_path):
  pool = odd_pool()
  back = tfds_pool.load_pool(tfds_pool.write_pool(pool, str(tmp_path), "odd"))
  assert dump(back) == dump(pool)


def test_dataset_info_carries_version_and_release_notes(tmp_path):
  path = tfds_pool.write_pool(odd_pool(), str(tmp_path), "odd")
  builder = tfds.builder_from_directory(path)
  assert str(builder.info.version) == "1.0.0"
  assert "1.0.0" in builder.info.release_notes
  assert builder.info.splits["test"].num_examples == 1
  assert builder.info.file_format.value == "array_record"


@settings(max_examples=50, deadline=None)
@given(
  task=st.builds(
    Task,
    id=st.text(max_size=8),
    family=st.text(max_size=8),
    split=st.sampled_from(["train", "test"]),
    difficulty=st.integers(0, 100),
    tags=st.lists(st.text(max_size=5), max_size=3).map(tuple),
    seed=st.integers(-(2**63), 2**63 - 1),
    payload=st.dictionaries(st.text(max_size=4), st.integers() | st.text()),
  ),
  index=st.integers(0, 10**6),
)
def test_record_functions_round_trip(task, index):
  record = tfds_pool.task_to_record(task, index)
  assert tfds_pool.record_to_task(record) == (index, task)


def test_errors(tmp_path):
  with pytest.raises(ValueError, match="empty"):
    tfds_pool.write_pool(TaskPool([]), str(tmp_path))
  with pytest.raises(tfds_pool.TaskRecordError, match="int64"):
    tfds_pool.task_to_record(Task(id="x", family="f", seed=2**63), 0)
  with pytest.raises(tfds_pool.TaskRecordError, match="JSON object"):
    tfds_pool.record_to_task(
      {**tfds_pool.task_to_record(Task(id="x", family="f"), 0), "payload": "[]"}
    )
  path = tfds_pool.write_pool(odd_pool(), str(tmp_path), "odd")
  with pytest.raises(KeyError, match="not in"):
    tfds_pool.load_pool(path, splits=["validation"])
  with pytest.raises(ValueError, match="needs pool"):
    tfds_pool.TaskPoolDataset(
      config="other", data_dir=str(tmp_path)
    ).download_and_prepare()


def test_sokoban_pool_round_trip(tmp_path):
  pool = TaskPool.from_envs(
    [
      dict(env="sokoban", difficulties=[0, 1], counts=[2, 1]),
      dict(env="sokoban", counts=[1], split="test", negative_rate=0.5),
    ]
  )
  back = tfds_pool.load_pool(tfds_pool.write_pool(pool, str(tmp_path), "sok"))
  assert back == pool
