"""A TaskPool as a TensorFlow Datasets dataset, in array_record, without TF.

`TaskPoolDataset` is a `tfds.core.GeneratorBasedBuilder`; `write_pool`
materializes a pool with `file_format="array_record"` and `load_pool` reads
it back through `tfds.builder_from_directory(...).as_data_source()`, which
gives random access to the records with numpy only. TensorFlow is never
imported: tfds 4.9 encodes examples with its own numpy/protobuf serializer
and writes array_record shards through the `array_record` package.

One record per task: the task's fields, `payload` as a JSON string (so any
JSON payload fits one fixed feature spec), and `index`, its position in the
pool, because tfds shuffles records within a split when writing.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow_datasets as tfds
from etils import epath
from tensorflow_datasets.core.utils.py_utils import classproperty

from agentic_rl.data.pool import TaskPool
from agentic_rl.types import Task

_INT64 = np.iinfo(np.int64)


class TaskRecordError(ValueError):
  """A task cannot be stored in (or rebuilt from) a record."""


def task_to_record(task: Task, index: int) -> dict[str, Any]:
  """The tfds example of one task."""
  for name in ("difficulty", "seed"):
    value = getattr(task, name)
    if not _INT64.min <= value <= _INT64.max:
      raise TaskRecordError(f"task {task.id!r}: {name} {value} is not int64")
  return {
    "index": index,
    "id": task.id,
    "family": task.family,
    "split": task.split,
    "difficulty": task.difficulty,
    "tags": list(task.tags),
    "seed": task.seed,
    "payload": json.dumps(task.payload, sort_keys=True, allow_nan=True),
  }


def _text(value: bytes | str) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def record_to_task(record: Mapping[str, Any]) -> tuple[int, Task]:
  """(pool index, task) from a decoded record."""
  payload = json.loads(_text(record["payload"]))
  if not isinstance(payload, dict):
    raise TaskRecordError(f"payload is not a JSON object: {payload!r}")
  task = Task(
    id=_text(record["id"]),
    family=_text(record["family"]),
    split=_text(record["split"]),
    difficulty=int(record["difficulty"]),
    tags=tuple(_text(t) for t in record["tags"]),
    seed=int(record["seed"]),
    payload=payload,
  )
  return int(record["index"]), task


class _LocalInfo(tfds.core.DatasetInfo):
  """DatasetInfo of a pool that exists only on local disk.

  A builder whose info file is not written yet asks `initialize_from_bucket`
  for precomputed metadata on the TFDS bucket; tfds 4.9 makes a temporary
  directory for it first and never removes it, even with GCS off (one empty
  `/tmp/tmp*tfds` per `write_pool`). A task pool is never on the bucket.
  """

  def initialize_from_bucket(self) -> None:
    pass


class TaskPoolDataset(tfds.core.GeneratorBasedBuilder):
  """Tasks of a `TaskPool`, one tfds split per task split.

  Build with `TaskPoolDataset(pool=..., config=name, data_dir=...)`; the
  config name names the pool, so several pools share one data_dir. Reading
  needs no pool.
  """

  name = "agentic_rl_task_pool"
  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {
    "1.0.0": "Task fields, payload as JSON text, pool index per record.",
  }

  @classproperty
  @classmethod
  def code_path(cls) -> epath.Path:
    # tfds 4.9.10's default looks the package up through the
    # `importlib_resources` backport, which it only requires on Python < 3.9,
    # so it fails here for any builder defined inside a package. The source
    # file (its own fallback) is all tfds needs: where checksums would live.
    return epath.Path(inspect.getfile(cls))

  def __init__(
    self,
    *,
    pool: TaskPool | None = None,
    config: str | tfds.core.BuilderConfig | None = "default",
    **kwargs: Any,
  ):
    self._pool = pool
    if isinstance(config, str):
      config = tfds.core.BuilderConfig(name=config)
    super().__init__(config=config, **kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    # DatasetInfo directly: `dataset_info_from_configs` reads metadata files
    # from the package directory, which a code-defined builder does not have.
    return _LocalInfo(
      builder=self,
      description="Agentic RL tasks: taxonomy, seed and JSON payload.",
      features=tfds.features.FeaturesDict(
        {
          "index": np.int64,
          "id": tfds.features.Text(),
          "family": tfds.features.Text(),
          "split": tfds.features.Text(),
          "difficulty": np.int64,
          "tags": tfds.features.Sequence(tfds.features.Text()),
          "seed": np.int64,
          "payload": tfds.features.Text(),
        }
      ),
    )

  def _split_generators(self, dl_manager: Any) -> dict[str, Iterator]:
    del dl_manager  # nothing to download: tasks come from generators
    if self._pool is None:
      raise ValueError(
        "TaskPoolDataset needs pool=... to prepare; reading does not"
      )
    indexed = list(enumerate(self._pool))
    splits = sorted({t.split for t in self._pool})
    return {
      s: self._generate_examples([(i, t) for i, t in indexed if t.split == s])
      for s in splits
    }

  def _generate_examples(
    self, tasks: Sequence[tuple[int, Task]]
  ) -> Iterator[tuple[int, dict[str, Any]]]:
    for index, task in tasks:
      yield index, task_to_record(task, index)


def write_pool(pool: TaskPool, data_dir: str, name: str = "default") -> str:
  """Materializes `pool` as array_record; returns the dataset directory."""
  if len(pool) == 0:
    raise ValueError("cannot write an empty task pool")
  builder = TaskPoolDataset(
    pool=pool, config=name, data_dir=data_dir, file_format="array_record"
  )
  builder.download_and_prepare()
  return os.fspath(builder.data_dir)


def dataset_dir(data_dir: str, name: str = "default") -> str:
  """Where `write_pool(pool, data_dir, name)` puts the dataset."""
  version = str(TaskPoolDataset.VERSION)
  return os.path.join(data_dir, TaskPoolDataset.name, name, version)


def load_pool(path: str, splits: Sequence[str] | None = None) -> TaskPool:
  """Reads a written pool back, in its original task order.

  Args:
    path: the directory `write_pool` returned (see `dataset_dir`).
    splits: which task splits to load; all by default.
  """
  builder = tfds.builder_from_directory(path)
  sources = builder.as_data_source()
  wanted = list(sources) if splits is None else list(splits)
  missing = sorted(set(wanted) - set(sources))
  if missing:
    raise KeyError(f"splits {missing} not in {path}; has {sorted(sources)}")
  indexed = []
  for split in wanted:
    source = sources[split]
    indexed.extend(record_to_task(source[i]) for i in range(len(source)))
  indexed.sort(key=lambda it: it[0])
  return TaskPool([t for _, t in indexed])
