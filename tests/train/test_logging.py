"""MetricWriter: TensorBoard events read back, JSONL parses, console line."""

import io
import json
import math
import os

import jax.numpy as jnp
import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator

from agentic_rl.train import logging as mlog


def test_writer_round_trip(tmp_path):
  console = io.StringIO()
  logdir = str(tmp_path / "logs")
  with mlog.MetricWriter(
    logdir, console=console, console_keys=("loss", "kl")
  ) as w:
    w.write_scalars(1, {"loss": 0.5, "kl": np.float32(0.25), "lr": 1e-3})
    w.write_scalars(2, {"loss": jnp.asarray(0.125), "kl": float("nan")})

  acc = event_accumulator.EventAccumulator(logdir)
  acc.Reload()
  assert set(acc.Tags()["scalars"]) == {"loss", "kl", "lr"}
  loss = acc.Scalars("loss")
  assert [e.step for e in loss] == [1, 2]
  np.testing.assert_allclose([e.value for e in loss], [0.5, 0.125])
  assert math.isnan(acc.Scalars("kl")[1].value)

  path = os.path.join(logdir, mlog.JSONL_NAME)
  with open(path) as f:
    raw = [json.loads(line) for line in f]  # strict JSON, parses as is
  assert raw[1]["kl"] == "NaN"
  rows = mlog.read_jsonl(path)
  assert [r["step"] for r in rows] == [1, 2]
  assert rows[0]["lr"] == pytest.approx(1e-3)
  assert math.isnan(rows[1]["kl"])

  lines = console.getvalue().splitlines()
  assert lines[0] == "step 1 | loss 0.5 | kl 0.25"
  assert lines[1].startswith("step 2 | loss 0.125 | kl nan | ")
  assert lines[1].endswith("steps/s")


def test_console_every_and_append(tmp_path):
  console = io.StringIO()
  w = mlog.MetricWriter(str(tmp_path), console=console, console_every=2)
  for step in range(1, 5):
    w.write_scalars(step, {"x": step})
  w.close()
  # A resumed run appends to the same JSONL file.
  w2 = mlog.MetricWriter(str(tmp_path), console=None, tensorboard=False)
  w2.write_scalars(5, {"x": 5})
  w2.close()
  assert len(console.getvalue().splitlines()) == 2
  rows = mlog.read_jsonl(str(tmp_path / mlog.JSONL_NAME))
  assert [r["x"] for r in rows] == [1, 2, 3, 4, 5]


def test_non_scalar_metric_is_rejected(tmp_path):
  w = mlog.MetricWriter(str(tmp_path), console=None)
  with pytest.raises(mlog.MetricValueError, match="vec"):
    w.write_scalars(0, {"vec": np.ones(3)})
  with pytest.raises(mlog.MetricValueError, match="name"):
    w.write_scalars(0, {"name": "abc"})
  w.close()


def _steps(logdir, tag):
  acc = event_accumulator.EventAccumulator(str(logdir))
  acc.Reload()
  return (
    [e.step for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []
  )


def test_set_aside_after_a_mark_keeps_each_step_once(tmp_path):
  """A run resumed from a checkpoint redoes the steps logged after it: they
  move to stale files (kept, readable) instead of being listed twice."""
  logs = tmp_path / "logs"
  w = mlog.MetricWriter(str(logs), console=None)
  w.write_scalars(50, {"sft/loss": 2.0})  # SFT counts its own steps
  w.write_scalars(1, {"loss": 1.0})
  w.flush()
  mark = mlog.log_mark(logs)  # the checkpoint after RL step 1
  w.write_scalars(2, {"loss": 99.0})
  w.write_scalars(3, {"loss": 98.0})
  w.flush()  # then killed
  assert _steps(logs, "loss") == [1, 2, 3]

  stale = mlog.set_aside_after(logs, mark)
  rows = mlog.read_jsonl(str(logs / mlog.JSONL_NAME))
  assert [r["step"] for r in rows] == [50, 1]
  (stale_jsonl,) = [p for p in stale if p.name == "metrics.jsonl.stale1"]
  assert [r["loss"] for r in mlog.read_jsonl(str(stale_jsonl))] == [99.0, 98.0]
  (stale_events,) = [p for p in stale if p != stale_jsonl]
  assert "tfevents" not in stale_events.name and "stale1" in stale_events.name
  assert _steps(logs, "loss") == [1]
  assert _steps(logs, "sft/loss") == [50]  # older steps of other tags stay

  w2 = mlog.MetricWriter(str(logs), console=None)  # the resumed run
  w2.write_scalars(2, {"loss": 0.5})
  w2.close()
  w.close()
  assert _steps(logs, "loss") == [1, 2]
  rows = mlog.read_jsonl(str(logs / mlog.JSONL_NAME))
  assert [r.get("loss") for r in rows] == [None, 1.0, 0.5]
  # The stale events tail is whole records: it reads back on its own.
  moved = tmp_path / "moved"
  moved.mkdir()
  (moved / "events.out.tfevents.0").write_bytes(stale_events.read_bytes())
  assert _steps(moved, "loss") == [2, 3]

  # A start from scratch (no checkpoint) sets everything aside, as stale2.
  stale = mlog.set_aside_after(logs, {})
  assert {p.name for p in stale} >= {"metrics.jsonl.stale2"}
  assert all("stale2" in p.name for p in stale)
  assert mlog.log_mark(logs) == {}
  assert mlog.set_aside_after(logs, {}) == []
