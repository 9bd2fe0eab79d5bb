"""Smoke run of the sampler benchmark script (slow: builds HF and JAX)."""

import dataclasses
import json

import pytest

from tests.sampling import bench_scripts


def _bench():
  return bench_scripts.load("sampler")


@pytest.mark.slow
def test_quick_benchmark_writes_json(tmp_path):
  module = _bench()
  out = tmp_path / "sampler.json"
  module.main(["--quick", "--layout_ab", "--out", str(out)])
  report = json.loads(out.read_text())
  assert report["kv_cache"]["equal"]
  assert report["logit_max_abs_diff"] < 1e-4
  assert report["multi_turn"]["cache_equals_reprefill_tokens"]
  assert report["single_turn"][0]["greedy_token_agreement"] > 0.9
  by_length = report["decode_by_cache_length"]["rows"]
  assert [r["cache_len"] for r in by_length] == [128, 320]
  assert [r["cache_blocks"] for r in by_length] == [1, 3]  # 128+128+64
  assert all(r["step_ms"] > 0 for r in by_length)
  # Both kernel layouts emit the same tokens in both workloads.
  ab = report["layout_ab"]
  assert set(ab) == {"single_turn_batch32", "multi_turn_cache"}
  assert all(
    r["same_tokens"] and r["out_first_seconds"] > 0 for r in ab.values()
  )


def test_matmul_bound_counts_generate_flops_by_hand():
  module = _bench()
  config = module.models.get_preset(module.PRESET)
  bound = module.matmul_bound(config, batch=1, prompt_len=4, new=3, repeats=1)
  # qwen3-bench per token: 4 layers x (q,o 256x256; k,v 256x128; 3 MLP
  # 256x1024) = 3,932,160 weights; unembedding 256 x 1024 = 262,144.
  prefill = 2 * (4 * 3_932_160 + 262_144)  # unembed the last position only
  decode = 2 * 2 * (3_932_160 + 262_144)  # 2 decode steps
  assert bound["weight_matmul_gflop"] * 1e9 == pytest.approx(prefill + decode)
  seconds = (
    prefill / bound["peak_gflops_prefill"]
    + decode / bound["peak_gflops_decode"]
  ) / 1e9
  assert bound["seconds_bound"] == pytest.approx(seconds)
  assert bound["tokens_per_s_bound"] == pytest.approx(3 / seconds)
  assert 0 < bound["peak_gflops_decode"] < 1e5
  # Memory reads: the same call at its measured stream speed.
  read_prefill, read_decode = module.generate_bytes(config, 1, 4, 3)
  assert bound["read_gb"] * 1e9 == pytest.approx(read_prefill + read_decode)
  gbps = bound["stream_read_gbps"]
  assert gbps > 0
  overlapped = max(
    prefill / bound["peak_gflops_prefill"], read_prefill / gbps
  ) + max(decode / bound["peak_gflops_decode"], read_decode / gbps)
  assert bound["tokens_per_s_bound_with_reads"] == pytest.approx(
    3 / (overlapped / 1e9)
  )
  serial = seconds + (read_prefill + read_decode) / gbps / 1e9
  assert bound["tokens_per_s_bound_reads_not_overlapped"] == pytest.approx(
    3 / serial
  )
  assert (
    bound["tokens_per_s_bound_reads_not_overlapped"]
    < bound["tokens_per_s_bound_with_reads"]
    <= bound["tokens_per_s_bound"]
  )


def test_generate_bytes_counts_weights_and_kv_reads_by_hand():
  module = _bench()
  config = module.models.get_preset(module.PRESET)
  prefill, decode = module.generate_bytes(config, batch=2, prompt_len=4, new=3)
  # 3,932,160 block weights + 262,144 unembedding, float32.
  weights = 4 * (3_932_160 + 262_144)
  assert prefill == weights
  # k and v, 4 layers, 2 kv heads, head dim 64, float32: 4,096 B a
  # position a row; steps 1 and 2 attend to 5 and 6 positions of 2 rows.
  assert decode == 2 * weights + 4_096 * 2 * (5 + 6)
  # bfloat16 weights halve the weight bytes; the float32 cache is the same.
  bf16 = dataclasses.replace(config, param_dtype="bfloat16")
  assert module.generate_bytes(bf16, 2, 4, 3) == (
    weights // 2,
    weights + 4_096 * 2 * (5 + 6),
  )


def test_decode_op_time_reads_the_decode_ops_from_a_trace():
  module = _bench()
  model = module.models.build(module.models.get_preset(module.PRESET), 0)
  r = module.decode_op_time(model, batch=2, steps=8)
  assert r["batch"] == 2 and r["cores"] == module.os.cpu_count()
  # The trace held the decode's ops: they fill most of the step (the rest
  # is dispatch), and more of them cannot run at once than there are
  # threads to run them (the pool's, one a core, and the caller's).
  assert 0.3 < r["ops_at_once"] <= r["cores"] + 1
  assert r["op_ms_per_step"] == pytest.approx(
    r["ops_at_once"] * r["wall_ms_per_step"]
  )
  assert r["tokens_per_s_all_cores_busy"] == pytest.approx(
    1e3 * r["cores"] * 2 / r["op_ms_per_step"]
  )


def test_bfloat16_preset_builds_both_sides_in_bfloat16():
  """`--dtype=bfloat16`: HF and the NNX copy both store bfloat16 weights
  and agree on logits to bfloat16 precision."""
  import jax.numpy as jnp
  import numpy as np
  import torch

  module = _bench()
  config = module.models.get_preset(
    module.PRESET, dtype="bfloat16", param_dtype="bfloat16"
  )
  reference = module.hf_reference(config, seed=0)
  assert {p.dtype for p in reference.parameters()} == {torch.bfloat16}
  model = module.nnx_copy(reference, config)
  assert model.embed.embedding[...].dtype == jnp.bfloat16
  diff = module.logit_parity(model, reference, np.random.default_rng(0))
  # Logits are O(1): bfloat16 keeps 8 bits of mantissa, far from 1e-4
  # (float32 parity) but far below a wrong weight's error.
  assert 1e-4 < diff < 0.5
