"""Smoke run of the sampler benchmark script (slow: builds HF and JAX)."""

import importlib.util
import json
import pathlib

import pytest

SCRIPT = (
  pathlib.Path(__file__).resolve().parents[2]
  / "scripts"
  / "benchmarks"
  / "sampler.py"
)


@pytest.mark.slow
def test_quick_benchmark_writes_json(tmp_path):
  spec = importlib.util.spec_from_file_location("bench_sampler", SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  out = tmp_path / "sampler.json"
  module.main(["--quick", "--out", str(out)])
  report = json.loads(out.read_text())
  assert report["kv_cache"]["equal"]
  assert report["logit_max_abs_diff"] < 1e-4
  assert report["multi_turn"]["cache_equals_reprefill_tokens"]
  assert report["single_turn"][0]["greedy_token_agreement"] > 0.9
