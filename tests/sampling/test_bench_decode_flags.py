"""The XLA-flags A/B benchmark (scripts/benchmarks/decode_flags.py)."""

import argparse
import json

import pytest

from tests.sampling import bench_scripts


def _bench():
  return bench_scripts.load("decode_flags")


def test_arms_parse_and_bad_arms_are_refused():
  module = _bench()
  assert module.parse_arm("default=") == ("default", "")
  assert module.parse_arm("a=--x=1 --y=2") == ("a", "--x=1 --y=2")
  for bad in ("noflags", "=--x=1"):
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=XLA_FLAGS"):
      module.parse_arm(bad)
  with pytest.raises(SystemExit, match="must differ"):
    module.main(["--arm", "a=", "--arm", "a=--x=1"])


def test_worker_times_a_turn_and_hashes_its_tokens():
  module = _bench()
  args = argparse.Namespace(
    preset="tiny", dtype="float32", batch=2, steps=4, repeats=2
  )
  row = module.worker(args)
  assert row["tokens_per_s"] == pytest.approx(2 * 4 / row["turn_seconds"])
  assert row["decode_step_ms"] > 0 and row["compile_seconds"] >= 0
  assert row["backend"] == "cpu" and row["peak_bytes"] is None
  # Same seed, same weights and prompts: the same tokens in a second run.
  assert module.worker(args)["tokens_sha256"] == row["tokens_sha256"]


@pytest.mark.slow
def test_arms_run_in_their_own_processes(tmp_path):
  # Two arms and a third that XLA rejects: it fails alone, named.
  module = _bench()
  out = tmp_path / "flags.json"
  module.main(
    [
      "--preset=tiny",
      "--batch=2",
      "--steps=4",
      "--repeats=1",
      "--arm=default=",
      "--arm=opt0=--xla_backend_optimization_level=0",
      "--arm=bogus=--xla_no_such_flag_anywhere=1",
      f"--out={out}",
    ]
  )
  report = json.loads(out.read_text())
  rows = {r["arm"]: r for r in report["rows"]}
  assert rows["bogus"]["error"] == "child failed" and rows["bogus"]["rc"] != 0
  flag = "--xla_backend_optimization_level=0"
  assert rows["opt0"]["xla_flags"].endswith(flag)
  assert report["same_tokens"]
  assert rows["default"]["tokens_sha256"] == rows["opt0"]["tokens_sha256"]
