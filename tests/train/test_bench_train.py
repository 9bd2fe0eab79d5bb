"""The RL-update benchmark's variants and op-time summary
(scripts/benchmarks/train.py)."""

import pytest

from agentic_rl import models
from agentic_rl.models import transformer
from tests.sampling import bench_scripts


def _bench():
  return bench_scripts.load("train")


def _meta(pid, name):
  return {"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}


def _op(pid, dur, hlo_op=None, name="kernel"):
  args = {"hlo_op": hlo_op} if hlo_op else {}
  return {"ph": "X", "pid": pid, "dur": dur, "name": name, "args": args}


def test_op_time_sums_the_device_streams_by_op_kind():
  module = _bench()
  events = [
    _meta(1, "/host:CPU"),
    _meta(2, "/device:GPU:0"),
    _op(1, 1000, "fusion.1"),  # host thread: left out when a device exists
    _op(2, 100, "fusion.3"),
    _op(2, 50, "fusion.7"),
    _op(2, 30, "custom-call.1"),
    _op(2, 20, name="MemcpyD2D"),  # no XLA op: named by the kernel
  ]
  got = module.op_time(events, wall_s=1e-3)
  assert got["op_s"] == pytest.approx(200e-6)
  assert got["busy"] == pytest.approx(0.2)
  assert got["ops"] == 4
  assert [(o["op"], o["count"]) for o in got["top"]] == [
    ("fusion", 2),
    ("custom-call", 1),
    ("MemcpyD2D", 1),
  ]
  assert got["top"][0]["share"] == pytest.approx(0.75)


def test_op_time_on_a_cpu_trace_skips_loops_and_host_work():
  module = _bench()
  events = [
    _meta(1, "/host:CPU"),
    _op(1, 500, "while.2"),  # holds the ops below: not counted twice
    _op(1, 300, "dot.4"),
    _op(1, 100, "copy_fusion"),
    _op(1, 900),  # Python, dispatch: no XLA op
  ]
  got = module.op_time(events, wall_s=8e-4)
  assert got["op_s"] == pytest.approx(400e-6)
  assert [o["op"] for o in got["top"]] == ["dot", "copy_fusion"]
  with pytest.raises(RuntimeError, match="no XLA op"):
    module.op_time([_meta(1, "/host:CPU"), _op(1, 5)], wall_s=1.0)


def test_variants_parse_and_bad_ones_are_refused():
  module = _bench()
  assert module.parse_variant("full/dots/1024") == ("full", "dots", 1024)
  assert module.parse_variant("64/none/0") == ("64", "none", 0)
  for bad in ("full/dots", "half/none/0", "full/none/x"):
    with pytest.raises(ValueError):
      module.parse_variant(bad)


def test_a_traced_row_records_its_form_memory_and_trace(tmp_path):
  module = _bench()
  before = transformer.CAUSAL_BLOCK
  config = models.get_preset("tiny", remat="dots", logits_chunk=32)
  row = module.time_update(
    config, rows=2, length=64, block=32, repeats=1, trace=True,
    trace_dir=str(tmp_path),
  )  # fmt: skip
  assert (row["attention"], row["remat"], row["logits_chunk"]) == (
    "blocked 32",
    "dots",
    32,
  )
  assert row["loss_finite"] and row["temp_gib"] > 0
  assert row["tokens_per_s"] == pytest.approx(128 / row["seconds_per_update"])
  t = row["op_time"]
  assert t["ops"] > 0 and 0 < t["op_s"] and t["top"][0]["s"] > 0
  (trace,) = tmp_path.glob("trace_2x64_blocked32_dots_32.json.gz")
  assert trace.stat().st_size > 0
  assert transformer.CAUSAL_BLOCK == before  # the module setting, restored
