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
