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
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

JSONL_NAME = "metrics.jsonl"
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
