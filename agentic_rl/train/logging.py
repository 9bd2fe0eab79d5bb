"""Metric writers: TensorBoard event files, a JSON-lines file, a console line.

Host-only. Callers hand over metrics already fetched to the host (numpy
scalars or Python numbers, e.g. from `jax.device_get`), so no hidden device
sync happens here. TensorBoard events are written with the `tensorboard`
package's own `EventFileWriter` and protos; TensorFlow is not needed.

The JSON-lines file (`metrics.jsonl`) holds one object per `write_scalars`
call: `{"step": int, "time": float, "<name>": float, ...}`. It is strict
JSON: non-finite values are written as the strings "NaN", "Infinity" and
"-Infinity" (see `read_jsonl`, which turns them back into floats).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import re
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

JSONL_NAME = "metrics.jsonl"
_TFEVENTS = "tfevents"  # TensorBoard reads files with this in their name
_STALE = re.compile(r"stale(\d+)")
_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class MetricValueError(ValueError):
  """A metric is not a real scalar."""


def _to_float(name: str, value: Any) -> float:
  arr = np.asarray(value)
  if arr.size != 1 or not np.issubdtype(arr.dtype, np.number):
    raise MetricValueError(
      f"metric {name!r} must be a real scalar, got {arr.dtype} {arr.shape}"
    )
  if np.iscomplexobj(arr):
    raise MetricValueError(f"metric {name!r} is complex: {value}")
  return float(arr.reshape(()))


def _json_value(x: float) -> float | str:
  if math.isnan(x):
    return "NaN"
  if math.isinf(x):
    return "Infinity" if x > 0 else "-Infinity"
  return x


def _restore(v: Any) -> Any:
  return _NONFINITE[v] if isinstance(v, str) and v in _NONFINITE else v


def read_jsonl(path: str) -> list[dict[str, Any]]:
  """Reads a metrics.jsonl file back, restoring non-finite floats."""
  rows = []
  with open(path) as f:
    for line in f:
      if line.strip():
        row = json.loads(line)
        rows.append({k: _restore(v) for k, v in row.items()})
  return rows


def log_mark(logdir: str | os.PathLike) -> dict[str, int]:
  """Sizes of `logdir`'s metric files (metrics.jsonl, TensorBoard events).

  Taken right after `MetricWriter.flush`, it marks where a checkpoint's log
  ends; `set_aside_after` cuts the files back to it.
  """
  return {
    p.name: p.stat().st_size
    for p in sorted(pathlib.Path(logdir).iterdir())
    if p.is_file() and (p.name == JSONL_NAME or _TFEVENTS in p.name)
  }


def set_aside_after(
  logdir: str | os.PathLike, mark: Mapping[str, int]
) -> list[pathlib.Path]:
  """Moves what was logged after `mark` (from `log_mark`) aside, keeping it.

  A run resumed from a checkpoint repeats every step logged after it (a run
  started from scratch, `mark` {}, every step): appending would list those
  steps twice, in metrics.jsonl and in TensorBoard. Each metric file's bytes
  past its size in `mark`, and all of a file `mark` does not list, move to a
  stale copy: `metrics.jsonl.stale<N>`, and for an events file its name with
  "tfevents" replaced by "stale<N>", which TensorBoard does not read. Both
  formats hold whole records up to a flushed size, so every part stays
  readable. N is one past the highest in use. Returns the stale paths.
  """
  logdir = pathlib.Path(logdir)
  if not logdir.is_dir():
    return []
  moves = [
    (name, mark.get(name, 0))
    for name, size in log_mark(logdir).items()
    if name not in mark or size > mark[name]
  ]
  if not moves:
    return []
  used = [int(m) for p in logdir.iterdir() for m in _STALE.findall(p.name)]
  n = max(used, default=0) + 1
  stale = []
  for name, keep in moves:
    path = logdir / name
    if name == JSONL_NAME:
      target = logdir / f"{JSONL_NAME}.stale{n}"
    else:
      target = logdir / name.replace(_TFEVENTS, f"stale{n}")
    if keep == 0:
      path.rename(target)
    else:
      with open(path, "rb") as f:
        f.seek(keep)
        target.write_bytes(f.read())
      os.truncate(path, keep)
    stale.append(target)
  return stale


def format_progress(
  step: int, scalars: Mapping[str, float], keys: tuple[str, ...] = ()
) -> str:
  """One console line: `step 12 | loss 0.1234 | kl 1.2e-03`."""
  names = [k for k in keys if k in scalars] if keys else sorted(scalars)
  parts = [f"step {step}"]
  for k in names:
    v = scalars[k]
    parts.append(f"{k} {v:.4g}")
  return " | ".join(parts)


class MetricWriter:
  """Writes scalars to TensorBoard, `metrics.jsonl` and the console.

  Use as a context manager or call `close()`. `console_keys` picks (and
  orders) the metrics on the console line; empty means all, sorted.
  `console_every` prints every n-th step only (files get every step).
  """

  def __init__(
    self,
    logdir: str,
    *,
    tensorboard: bool = True,
    jsonl: bool = True,
    console: TextIO | None = sys.stdout,
    console_keys: tuple[str, ...] = (),
    console_every: int = 1,
    flush_secs: float = 30.0,
  ):
    if console_every < 1:
      raise ValueError(f"console_every must be >= 1, got {console_every}")
    os.makedirs(logdir, exist_ok=True)
    self.logdir = logdir
    self._events = (
      EventFileWriter(logdir, flush_secs=flush_secs) if tensorboard else None
    )
    self._jsonl = (
      open(os.path.join(logdir, JSONL_NAME), "a", encoding="utf-8")
      if jsonl
      else None
    )
    self._console = console
    self._console_keys = tuple(console_keys)
    self._console_every = console_every
    self._last_time: float | None = None
    self._last_step: int | None = None

  def write_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
    """Records every scalar at `step` (an int; the train step count)."""
    step = int(step)
    now = time.time()
    values = {str(k): _to_float(str(k), v) for k, v in scalars.items()}
    if self._events is not None:
      summary = summary_pb2.Summary(
        value=[
          summary_pb2.Summary.Value(tag=k, simple_value=v)
          for k, v in values.items()
        ]
      )
      self._events.add_event(
        event_pb2.Event(wall_time=now, step=step, summary=summary)
      )
    if self._jsonl is not None:
      row = {"step": step, "time": now}
      row.update({k: _json_value(v) for k, v in values.items()})
      self._jsonl.write(json.dumps(row, allow_nan=False) + "\n")
    if self._console is not None and step % self._console_every == 0:
      line = format_progress(step, values, self._console_keys)
      if self._last_time is not None and step > self._last_step:
        rate = (step - self._last_step) / max(now - self._last_time, 1e-9)
        line += f" | {rate:.3g} steps/s"
      self._last_time, self._last_step = now, step
      print(line, file=self._console, flush=True)

  def flush(self) -> None:
    if self._events is not None:
      self._events.flush()
    if self._jsonl is not None:
      self._jsonl.flush()

  def close(self) -> None:
    if self._events is not None:
      self._events.close()
      self._events = None
    if self._jsonl is not None:
      self._jsonl.close()
      self._jsonl = None

  def __enter__(self) -> MetricWriter:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
