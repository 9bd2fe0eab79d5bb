"""Sampler benchmark: this JAX sampler vs Hugging Face `generate` (torch CPU).

    python scripts/bench.py sampler [--out PATH] [--repeats N] [--quick]

Both sides run the same Qwen3-shaped model (preset "qwen3-bench": vocab
1024, hidden 256, 4 layers, 4 query / 2 kv heads, head dim 64, MLP 1024,
float32): a random `transformers.Qwen3ForCausalLM` whose weights are copied
into the NNX model with `agentic_rl.models.hf.from_hf_tensors`. `--preset`
names another Qwen3-family preset (say qwen3-0.6b, for an accelerator) and
`--dtype=bfloat16` stores and computes both sides in bfloat16. Decoding is
greedy with no stop ids, so every row emits exactly its budget.

* single-turn: batch 1, 8, 32; 64-token prompts; 64 new tokens. New tokens/s
  counts prefill + decode wall time (what `generate` does), after a warm-up
  call whose extra time is reported as compile time.
* multi-turn agent workload: 8 trajectories, 64-token prompts, 5 turns of 16
  generated tokens each followed by 32 observation tokens. Compared: the
  sampler keeping its KV cache across turns (extend), the same sampler
  re-prefilling the whole conversation every turn, and `generate` on the
  whole conversation every turn. The three take turns, round after round,
  so a drift in the machine's speed hits them alike; speedups are given
  best-of-rounds and as the median of the rounds' paired ratios.
* KV-cache bytes per slot, checked against
  2 * n_layers * max_len * n_kv_heads * head_dim * bytes.
* decode step by cache length: a 64-token context (span 128) decoded from
  caches of 128, 320 and 1,024 positions, batch 8. Reading only the span
  in place, the step costs the same at every length.
* decode-step breakdown at batch 32 (or `--breakdown_batch`), why the
  speed is what it is: the sampler's whole decode step; the model's cached
  forward alone (no token selection or loop bookkeeping); the forward
  without attention over the cache; and the floor, the model's weight
  matmuls alone (x @ W for every projection, chained, nothing else). Each
  is a jitted 64-step `fori_loop`, reported in ms per step and GFLOP/s of
  weight matmuls.
  A last variant runs the same floor with every layer reusing layer 0's
  weights: the same FLOPs over 1/n_layers of the bytes, which then stay in
  cache, so the gap between the two is what streaming the weights from
  memory costs (on a 2-core Zen 3 VM, most of the floor at batch 8).
* decode-step op time (`decode_op_time`), at the breakdown's batch and at
  half of it (the rows of one of two samplers): a profiler trace of one
  decode call, summing the durations of the decode executable's ops over
  every thread. Op time over wall time says how many ops ran at once; cores
  x rows / op time is what the step could reach with every core busy on
  those same kernels (no prefill, no Python): above it, only faster
  kernels help, not better use of the cores.
* matmul bound per single-turn batch: the weight-matrix FLOPs one
  `generate` call cannot avoid (every projection for the B x prompt tokens
  of the prefill, then for B rows at each of the new - 1 decode steps; the
  unembedding once per row per step) at the best speed this machine does
  the model's largest product at that many rows (torch or XLA, all cores).
  No implementation built on these libraries can beat B * new / that
  time; divided by the HF tokens/s it is the largest speedup over HF this
  machine allows them. With memory reads: each decode step must also read
  every weight and the KV cache it attends to (`generate_bytes`); at the
  machine's measured stream speed, overlapped perfectly with the products
  (per phase, the slower of the two) and not overlapped (their sum).

`--layout_ab` adds a kernel-layout A/B (`layout_ab`): a batch-32 single
turn and the multi-turn cache path with Dense kernels stored in-dims first
(the model's layout) and out-dims first, in turns, paired ratios.
`--kernels_out_first` builds every other sampler here with
`Sampler(kernels_out_first=True)` (Dense kernels stored out-dims first);
the breakdown's forward and matmul-floor loops keep the model's layout.

On an accelerator (`--hf_device=cuda`; JAX then runs on its default
backend, the GPU), `generate` runs on the same device, both sides do full
float32 products (no TF32: JAX's matmul precision is set to "highest"),
and the two-sampler mode, a way to use a second CPU core, is left out, as
is the op-time trace (a CPU measure). The JSON then also holds each side's
peak accelerator memory (`accelerator_memory`).

Prints a table and writes JSON (default experiments/benchmarks/sampler.json).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import gzip
import json
import os
import pathlib
import platform
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
import transformers
from flax import nnx

from agentic_rl import models
from agentic_rl.models import hf
from agentic_rl.sampling import Sampler

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "experiments" / "benchmarks" / "sampler.json"
PRESET = "qwen3-bench"
# Where `generate` and the torch side of the roofline run (`--hf_device`).
HF_DEVICE = torch.device("cpu")
# Extra `Sampler` arguments for every sampler built here
# (`--kernels_out_first`).
SAMPLER_OPTIONS: dict = {}


@functools.cache
def prng_key(i: int) -> jax.Array:
  """The PRNG key of turn `i`, built once: making a key from an int costs
  ~0.4 ms on CPU, which would be charged to the sampler's timings alone."""
  return jax.random.key(i)


def sync_torch() -> None:
  """Waits for queued torch work, so a timer sees it (a no-op on CPU)."""
  if HF_DEVICE.type == "cuda":
    torch.cuda.synchronize()


def torch_dtype(name: str) -> torch.dtype:
  """The torch dtype of a jnp dtype name ("float32", "bfloat16")."""
  return getattr(torch, name)


def hf_reference(config: models.ModelConfig, seed: int) -> torch.nn.Module:
  """A random HF Qwen3 model of the preset's shape and dtype (eval mode)."""
  hf_config = transformers.Qwen3Config(
    vocab_size=config.vocab_size,
    hidden_size=config.d_model,
    intermediate_size=config.mlp_dim,
    num_hidden_layers=config.n_layers,
    num_attention_heads=config.n_heads,
    num_key_value_heads=config.n_kv_heads,
    head_dim=config.head_dim,
    rms_norm_eps=config.norm_eps,
    rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
    tie_word_embeddings=config.tie_embeddings,
    max_position_embeddings=config.max_len,
    architectures=["Qwen3ForCausalLM"],
  )
  torch.manual_seed(seed)
  model = transformers.Qwen3ForCausalLM(hf_config).eval()
  with torch.no_grad():
    # HF's 0.02 init gives a nearly uniform model; larger weights make the
    # greedy argmax well separated so both sides pick the same tokens.
    for name, p in model.named_parameters():
      if not name.endswith("norm.weight"):
        p.normal_(0.0, 1.0 / np.sqrt(p.shape[-1]))
  return model.to(HF_DEVICE, dtype=torch_dtype(config.param_dtype))


def nnx_copy(reference: torch.nn.Module, config: models.ModelConfig):
  """The NNX model holding `reference`'s weights (in `config`'s dtype)."""
  tensors = {
    k: v.float().cpu().numpy() for k, v in reference.state_dict().items()
  }
  if config.tie_embeddings:
    tensors.pop("lm_head.weight", None)
  return hf.from_hf_tensors(tensors, config)


def hf_generate(model, prompts_BxL: np.ndarray, new_tokens: int) -> np.ndarray:
  ids = torch.tensor(prompts_BxL, dtype=torch.long, device=HF_DEVICE)
  with torch.inference_mode():
    out = model.generate(
      input_ids=ids,
      attention_mask=torch.ones_like(ids),
      max_new_tokens=new_tokens,
      min_new_tokens=new_tokens,
      do_sample=False,
      eos_token_id=None,
      pad_token_id=0,
    )
  return out[:, prompts_BxL.shape[1] :].cpu().numpy()


def timed(fn, repeats: int) -> tuple[float, float, object]:
  """(first-call seconds, best warm seconds, last result).

  Best-of-N rather than the median: the CPU is shared, and interference
  only ever adds time, so the minimum is the least noisy estimate.
  """
  start = time.perf_counter()
  result = fn()
  first = time.perf_counter() - start
  warm = []
  for _ in range(repeats):
    start = time.perf_counter()
    result = fn()
    warm.append(time.perf_counter() - start)
  return first, min(warm), result


def single_turn(model, reference, batch, prompt_len, new, repeats, rng):
  vocab = model.config.vocab_size
  prompts = rng.integers(0, vocab, (batch, prompt_len))
  sampler = Sampler(
    model,
    num_slots=batch,
    max_len=prompt_len + new,
    chunk_buckets=(prompt_len,),
    budget_buckets=(new,),
    **SAMPLER_OPTIONS,
  )
  rows = list(range(batch))

  def ours():
    sampler.prefill(rows, prompts.tolist())
    return np.stack(sampler.decode(prng_key(0), budget=new).tokens)

  first, warm, tokens = timed(ours, repeats)
  hf_first, hf_warm, hf_tokens = timed(
    lambda: hf_generate(reference, prompts, new), repeats
  )
  on_cpu = jax.default_backend() == "cpu"
  two = (
    two_samplers(model, prompts, new, repeats)
    if on_cpu and batch >= 8
    else None
  )
  bound = matmul_bound(model.config, batch, prompt_len, new, repeats)
  hf_tokens_per_s = batch * new / hf_warm
  return {
    "batch": batch,
    "prompt_len": prompt_len,
    "new_tokens": new,
    "jax_tokens_per_s": batch * new / warm,
    "jax_seconds": warm,
    "jax_compile_seconds": max(first - warm, 0.0),
    "hf_tokens_per_s": hf_tokens_per_s,
    "hf_seconds": hf_warm,
    "speedup": hf_warm / warm,
    "greedy_token_agreement": float(np.mean(tokens == hf_tokens)),
    # The same rows split over two samplers decoding in two threads, as
    # `Rollout` runs with `num_samplers=2`: each core drives one sampler.
    "jax_2x_tokens_per_s": two and batch * new / two[0],
    "speedup_2x": two and hf_warm / two[0],
    "jax_2x_same_tokens": two and bool(np.array_equal(two[1], tokens)),
    # Weight matmuls alone at the best speed measured here (see
    # `matmul_bound`): no implementation can exceed these.
    "matmul_bound": bound,
    "max_speedup_over_hf": bound["tokens_per_s_bound"] / hf_tokens_per_s,
    "hf_gflops": bound["weight_matmul_gflop"] * hf_tokens_per_s / (batch * new),
    "kv_cache_bytes_per_slot": sampler.cache_bytes_per_slot,
    "kv_cache_bytes_analytic": model.config.kv_cache_bytes_per_slot(
      prompt_len + new
    ),
  }


def two_samplers(model, prompts_BxL, new, repeats):
  """(best seconds, tokens) of B rows as two B/2-slot samplers, 2 threads."""
  half = prompts_BxL.shape[0] // 2
  parts = (prompts_BxL[:half], prompts_BxL[half:])
  samplers = [
    Sampler(
      model,
      num_slots=len(p),
      max_len=p.shape[1] + new,
      chunk_buckets=(p.shape[1],),
      budget_buckets=(new,),
      **SAMPLER_OPTIONS,
    )
    for p in parts
  ]

  def one(sampler, prompts):
    sampler.prefill(list(range(len(prompts))), prompts.tolist())
    return np.stack(sampler.decode(prng_key(0), budget=new).tokens)

  with concurrent.futures.ThreadPoolExecutor(2) as pool:

    def both():
      futures = [
        pool.submit(one, s, p) for s, p in zip(samplers, parts, strict=True)
      ]
      return np.concatenate([f.result() for f in futures])

    _, warm, tokens = timed(both, repeats)
  return warm, tokens


def matmul_peak_gflops(
  rows: int, d_in: int, d_out: int, repeats: int, dtype: str = "float32"
):
  """Best GFLOP/s of a (rows x d_in) @ (d_in x d_out) product on this machine.

  torch (its thread pool) and XLA (16 dependent products in one jitted
  loop, so none is hoisted), the faster counting: the speed a perfect
  implementation would get for this shape, every core used.
  """
  rng = np.random.default_rng(0)
  a = rng.standard_normal((rows, d_in), np.float32)
  b = rng.standard_normal((d_in, d_out), np.float32)
  chain = 16
  ta, tb = (
    torch.from_numpy(x).to(HF_DEVICE, torch_dtype(dtype)) for x in (a, b)
  )

  def run_torch():
    with torch.inference_mode():
      for _ in range(chain):
        torch.mm(ta, tb)
    sync_torch()

  @jax.jit
  def run_xla(a, b):
    body = lambda _, c: c + jnp.matmul(a + c, b)[0, 0] * 1e-9  # noqa: E731
    return jax.lax.fori_loop(0, chain, body, jnp.float32(0))

  ja, jb = jnp.asarray(a, dtype), jnp.asarray(b, dtype)
  seconds = min(
    timed(run_torch, repeats)[1],
    timed(lambda: jax.block_until_ready(run_xla(ja, jb)), repeats)[1],
  )
  return 2 * rows * d_in * d_out * chain / seconds / 1e9


@functools.cache
def stream_read_gbps(repeats: int, megabytes: int = 256) -> float:
  """Best GB/s of summing a float32 array far larger than any cache.

  torch (its thread pool) and XLA, the faster: how fast this machine
  streams bytes from memory, every core used. Measured once a process
  (it does not depend on the model or the batch).
  """
  n = megabytes * 2**20 // 4
  tx = torch.ones(n, device=HF_DEVICE)
  jx = jnp.ones((n,), jnp.float32)

  def run_torch():
    with torch.inference_mode():
      tx.sum()
    sync_torch()

  read_xla = jax.jit(jnp.sum)
  seconds = min(
    timed(run_torch, repeats)[1],
    timed(lambda: jax.block_until_ready(read_xla(jx)), repeats)[1],
  )
  return 4 * n / seconds / 1e9


def generate_bytes(config, batch, prompt_len, new) -> tuple[int, int]:
  """(prefill, decode) bytes one `generate` call must read from memory.

  Every weight once for the prefill and once per decode step (the
  qwen3-bench weights and a batch-32 KV cache, 34 MB, exceed a 32 MB
  last-level cache, so they do not stay resident between steps), plus
  the keys and values each decode step attends to: prompt_len + t
  positions at step t = 1 .. new - 1. Activations are left out.
  """
  weights = config.weight_dtype.itemsize * sum(config.matmul_weights())
  kv_per_position = config.kv_cache_bytes_per_slot(1) * batch
  positions = sum(prompt_len + t for t in range(1, new))
  return weights, (new - 1) * weights + kv_per_position * positions


def matmul_bound(config, batch, prompt_len, new, repeats):
  """A roofline for one `generate` call: its weight matmuls at peak speed.

  Work: every projection for the B x prompt tokens of the prefill and for
  B rows at each of the new - 1 decode steps, the unembedding once per row
  per step. Speed: the machine's best measured GFLOP/s for the MLP's
  product at that many rows (the largest of the model's products, so the
  most efficient; the others run slower), measured with its weights hot
  in cache, which a real decode step, streaming every layer's weights, is
  not. Attention, norms and sampling are left out, so no implementation
  built on these matmul libraries, HF's or this sampler, can beat it.
  """
  c = config
  per_token, unembed = config.matmul_weights()
  prefill = 2 * (batch * prompt_len * per_token + batch * unembed)
  decode = 2 * batch * (new - 1) * (per_token + unembed)
  peak_prefill = matmul_peak_gflops(
    batch * prompt_len, c.d_model, c.mlp_dim, repeats, c.param_dtype
  )
  peak_decode = matmul_peak_gflops(
    batch, c.d_model, c.mlp_dim, repeats, c.param_dtype
  )
  compute_prefill = prefill / peak_prefill / 1e9
  compute_decode = decode / peak_decode / 1e9
  seconds = compute_prefill + compute_decode
  # Memory: the bytes each phase must read at the machine's stream speed.
  # Reading overlapped perfectly with the products gives the larger of the
  # two times per phase; not overlapped at all, their sum.
  read_prefill, read_decode = generate_bytes(config, batch, prompt_len, new)
  gbps = stream_read_gbps(repeats)
  mem_prefill, mem_decode = read_prefill / gbps / 1e9, read_decode / gbps / 1e9
  overlapped = max(compute_prefill, mem_prefill) + max(
    compute_decode, mem_decode
  )
  serial = seconds + mem_prefill + mem_decode
  return {
    "weight_matmul_gflop": (prefill + decode) / 1e9,
    "peak_gflops_prefill": peak_prefill,
    "peak_gflops_decode": peak_decode,
    "seconds_bound": seconds,
    "tokens_per_s_bound": batch * new / seconds,
    "read_gb": (read_prefill + read_decode) / 1e9,
    "stream_read_gbps": gbps,
    "tokens_per_s_bound_with_reads": batch * new / overlapped,
    "tokens_per_s_bound_reads_not_overlapped": batch * new / serial,
  }


def cached_turns(sampler, prompts_BxP, observations_TxBxO, gen: int):
  """The multi-turn cache path: prefill, then per turn decode `gen` greedy
  tokens and extend every row by that turn's observation. Returns the
  conversations [B, P + T * (gen + O)]."""
  rows = list(range(len(prompts_BxP)))
  sampler.prefill(rows, prompts_BxP.tolist())
  convo = prompts_BxP
  for t, obs_BxO in enumerate(observations_TxBxO):
    out = np.stack(sampler.decode(prng_key(t), budget=gen).tokens)
    sampler.extend(rows, obs_BxO.tolist())
    convo = np.concatenate([convo, out, obs_BxO], axis=1)
  return convo


# The multi-turn agent workload: tokens of the prompt, generated per turn
# and appended as the observation per turn.
MULTI_PROMPT, MULTI_GEN, MULTI_OBS = 64, 16, 32


def multi_turn_inputs(args, rng, vocab: int):
  """(prompts [B, P], observations [T, B, O], cache max_len) of the
  multi-turn workload, the cache rounded up to a multiple of 64."""
  b, turns = args.trajectories, args.turns
  prompts = rng.integers(0, vocab, (b, MULTI_PROMPT))
  observations = rng.integers(0, vocab, (turns, b, MULTI_OBS))
  total = MULTI_PROMPT + turns * (MULTI_GEN + MULTI_OBS)
  return prompts, observations, -(-total // 64) * 64


def multi_turn(model, reference, args, rng):
  b, turns, gen = args.trajectories, args.turns, MULTI_GEN
  prompt_len = MULTI_PROMPT
  prompts, observations, max_len = multi_turn_inputs(
    args, rng, model.config.vocab_size
  )
  rows = list(range(b))

  def make():
    return Sampler(
      model,
      num_slots=b,
      max_len=max_len,
      budget_buckets=(gen,),
      **SAMPLER_OPTIONS,
    )

  cached_sampler, reprefill_sampler = make(), make()

  def with_cache():
    return cached_turns(cached_sampler, prompts, observations, gen)

  def re_prefill():
    sampler = reprefill_sampler
    convo = prompts.copy()
    for t in range(turns):
      sampler.prefill(rows, convo.tolist())
      out = np.stack(sampler.decode(prng_key(t), budget=gen).tokens)
      convo = np.concatenate([convo, out, observations[t]], axis=1)
    return convo

  def transformers_generate():
    convo = prompts.copy()
    for t in range(turns):
      out = hf_generate(reference, convo, gen)
      convo = np.concatenate([convo, out, observations[t]], axis=1)
    return convo

  # The modes take turns (cache, re-prefill, HF, cache, ...) so that a
  # drift in the machine's speed hits all three alike; the ratios are also
  # taken round by round and their median reported.
  modes = {
    "jax_cache": with_cache,
    "jax_reprefill": re_prefill,
    "hf_generate": transformers_generate,
  }
  first, convos, rounds = {}, {}, {name: [] for name in modes}
  for name, fn in modes.items():
    start = time.perf_counter()
    convos[name] = fn()
    first[name] = time.perf_counter() - start
  for _ in range(args.repeats):
    for name, fn in modes.items():
      start = time.perf_counter()
      convos[name] = fn()
      rounds[name].append(time.perf_counter() - start)
  results = {
    name: {
      "seconds": min(rounds[name]),
      "round_seconds": rounds[name],
      "first_call_seconds": first[name],
      "generated_tokens_per_s": b * turns * gen / min(rounds[name]),
    }
    for name in modes
  }

  def paired_median(slow: str, fast: str) -> float:
    return float(np.median(np.asarray(rounds[slow]) / np.asarray(rounds[fast])))

  return {
    "trajectories": b,
    "turns": turns,
    "generated_per_turn": gen,
    "observation_tokens_per_turn": MULTI_OBS,
    "prompt_len": prompt_len,
    "max_len": max_len,
    "modes": results,
    "cache_vs_reprefill_speedup": results["jax_reprefill"]["seconds"]
    / results["jax_cache"]["seconds"],
    "cache_vs_hf_speedup": results["hf_generate"]["seconds"]
    / results["jax_cache"]["seconds"],
    "cache_vs_reprefill_paired_median": paired_median(
      "jax_reprefill", "jax_cache"
    ),
    "cache_vs_hf_paired_median": paired_median("hf_generate", "jax_cache"),
    "cache_equals_reprefill_tokens": bool(
      np.array_equal(convos["jax_cache"], convos["jax_reprefill"])
    ),
    "cache_vs_hf_token_agreement": float(
      np.mean(convos["jax_cache"] == convos["hf_generate"])
    ),
  }


def layout_ab(model, args, rng, rounds: int = 8) -> dict:
  """Kernel layouts A/B: `Sampler(kernels_out_first=False / True)`.

  Two workloads, each run in both layouts round after round (so a drift
  in the machine's speed hits both alike): a batch-32 single turn (prefill
  64 tokens, decode 64) and the multi-turn cache path (8 rows, 5 turns of
  16 generated + 32 observation tokens). Reports each layout's best
  seconds, the median over rounds of in-first / out-first seconds (> 1:
  out-first faster), and whether both layouts emitted the same tokens.
  """
  vocab = model.config.vocab_size
  prompts32 = rng.integers(0, vocab, (32, 64)).tolist()
  prompts, observations, max_len = multi_turn_inputs(args, rng, vocab)

  def single(sampler):
    sampler.prefill(list(range(32)), prompts32)
    return np.stack(sampler.decode(prng_key(0), budget=64).tokens)

  def multi(sampler):
    return cached_turns(sampler, prompts, observations, MULTI_GEN)

  workloads = {
    "single_turn_batch32": (
      single,
      lambda first: Sampler(
        model,
        num_slots=32,
        max_len=128,
        chunk_buckets=(64,),
        budget_buckets=(64,),
        kernels_out_first=first,
      ),
    ),
    "multi_turn_cache": (
      multi,
      lambda first: Sampler(
        model,
        num_slots=len(prompts),
        max_len=max_len,
        budget_buckets=(MULTI_GEN,),
        kernels_out_first=first,
      ),
    ),
  }
  report = {}
  for name, (fn, make) in workloads.items():
    samplers = {first: make(first) for first in (False, True)}
    tokens = {first: fn(s) for first, s in samplers.items()}  # compiles
    seconds = {False: [], True: []}
    for _ in range(rounds):
      for first, sampler in samplers.items():
        start = time.perf_counter()
        tokens[first] = fn(sampler)
        seconds[first].append(time.perf_counter() - start)
    report[name] = {
      "in_first_seconds": min(seconds[False]),
      "out_first_seconds": min(seconds[True]),
      "paired_median_speedup": float(
        np.median(np.asarray(seconds[False]) / np.asarray(seconds[True]))
      ),
      "same_tokens": bool(np.array_equal(tokens[False], tokens[True])),
    }
  return report


def _per_step_ms(fn, args, steps: int, repeats: int) -> float:
  jax.block_until_ready(fn(*args))
  best = float("inf")
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - start)
  return 1e3 * best / steps


def decode_timer(model, batch: int, max_len: int, steps: int):
  """A function that prefills `batch` rows to `max_len - steps` tokens and
  returns the seconds one sampler decode call of `steps` tokens takes."""
  sampler = Sampler(
    model,
    num_slots=batch,
    max_len=max_len,
    budget_buckets=(steps,),
    **SAMPLER_OPTIONS,
  )
  prompts = np.zeros((batch, max_len - steps), np.int64).tolist()
  rows = list(range(batch))

  def decode_seconds() -> float:
    sampler.prefill(rows, prompts)
    jax.block_until_ready(sampler.state)
    start = time.perf_counter()
    sampler.decode(prng_key(0), budget=steps)
    return time.perf_counter() - start

  return decode_seconds


def decode_breakdown(model, batch: int, repeats: int, steps: int = 64):
  """ms per decode step of the whole sampler step and of its parts."""
  from agentic_rl.models import transformer

  config = model.config
  graphdef, params = nnx.split(model)
  max_len = 128
  write_Bx1 = jnp.ones((batch, 1), bool)

  def forward_loop(params, cache, lengths_B, no_attention):
    m = nnx.merge(graphdef, params)

    def body(_, carry):
      cache, lengths_B, tokens_B = carry
      if no_attention:  # attention output replaced by its queries
        attend, transformer.attend = transformer.attend, lambda q, *_, **__: q
      try:
        hidden, cache = m.forward_cached(
          tokens_B[:, None], lengths_B[:, None], write_Bx1, cache
        )
      finally:
        if no_attention:
          transformer.attend = attend
      logits = m.unembed(hidden[:, 0])
      return cache, lengths_B + 1, jnp.argmax(logits, -1).astype(jnp.int32)

    start = (cache, lengths_B, jnp.zeros((batch,), jnp.int32))
    return jax.lax.fori_loop(0, steps, body, start)[2]

  def matmul_floor(params, x_BxD, one_layer):
    m = nnx.merge(graphdef, params)
    kernels = []
    # one_layer: every layer multiplies by layer 0's weights, the same
    # FLOPs over a quarter of the bytes (4 layers), which then stay in
    # cache; the gap to the real floor is the cost of streaming weights.
    for layer in [m.layers[0]] * len(m.layers) if one_layer else m.layers:
      a, f = layer.attn, layer.mlp
      kernels.append(
        [
          a.q_proj.kernel[...].reshape(config.d_model, -1),
          a.k_proj.kernel[...].reshape(config.d_model, -1),
          a.v_proj.kernel[...].reshape(config.d_model, -1),
          a.o_proj.kernel[...].reshape(-1, config.d_model),
          f.gate_proj.kernel[...],
          f.up_proj.kernel[...],
          f.down_proj.kernel[...],
        ]
      )
    table_VxD = m.embed.embedding[...]

    def body(_, x):
      for wq, wk, wv, wo, wg, wu, wd in kernels:
        q, k, v = x @ wq, x @ wk, x @ wv
        x = x + (q + jnp.tile(k + v, (1, q.shape[1] // k.shape[1]))) @ wo
        x = x + ((x @ wg) * (x @ wu)) @ wd
      return x + 1e-3 * (x @ table_VxD.T)[:, : x.shape[1]]

    return jax.lax.fori_loop(0, steps, body, x_BxD)

  cache = transformer.init_cache(config, batch, max_len)
  lengths_B = jnp.full((batch,), max_len - steps, jnp.int32)
  forward = jax.jit(forward_loop, static_argnums=3)
  floor = jax.jit(matmul_floor, static_argnums=2)
  d, x_dtype = config.d_model, config.compute_dtype
  flop_per_step = 2 * batch * sum(config.matmul_weights())

  sampler_decode = decode_timer(model, batch, max_len, steps)
  sampler_decode()
  decode_ms = 1e3 * min(sampler_decode() for _ in range(repeats)) / steps
  parts = {
    "sampler_decode_step_ms": decode_ms,
    "cached_forward_step_ms": _per_step_ms(
      forward, (params, cache, lengths_B, False), steps, repeats
    ),
    "forward_without_attention_ms": _per_step_ms(
      forward, (params, cache, lengths_B, True), steps, repeats
    ),
    "weight_matmuls_only_ms": _per_step_ms(
      floor, (params, jnp.ones((batch, d), x_dtype), False), steps, repeats
    ),
    "weight_matmuls_one_layer_reused_ms": _per_step_ms(
      floor, (params, jnp.ones((batch, d), x_dtype), True), steps, repeats
    ),
  }
  return {
    "batch": batch,
    "cache_len": max_len,
    "weight_matmul_mflop_per_step": flop_per_step / 1e6,
    **parts,
    "weight_matmul_gflops_at_floor": flop_per_step
    / parts["weight_matmuls_only_ms"]
    / 1e6,
  }


def decode_op_time(model, batch: int, steps: int = 64) -> dict:
  """Time the decode step's XLA ops take, summed over threads, per step.

  A `jax.profiler` trace of one sampler decode call (after a warm-up): the
  durations of every op (thunk) of the decode executable, on whichever
  thread ran it, except the while loop that contains them. Op time / wall
  time is how many ops ran at once on average. If an op did not split its
  work across threads, op time is core time, and cores * batch / op time
  bounds the step's tokens per second with every core busy on these ops,
  at the speed they ran in this trace, and nothing else. (On the 2-core
  Intel VM of 2026-12-02 the op time was the same pinned to one core, 9.4
  against 9.6 ms at batch 32: no op used both cores. On a VM whose host
  takes time from it, "steal", an op's time includes what was taken.)
  """
  decode_seconds = decode_timer(model, batch, 128, steps)
  decode_seconds()
  with tempfile.TemporaryDirectory() as trace_dir:
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
      seconds = decode_seconds()
    (path,) = pathlib.Path(trace_dir).rglob("perfetto_trace.json.gz")
    events = json.loads(gzip.decompress(path.read_bytes()))
  events = events["traceEvents"] if isinstance(events, dict) else events
  op_us = 0.0
  for e in events:
    args = e.get("args", {})
    if (
      e.get("ph") == "X"
      and "decode" in args.get("hlo_module", "")
      and not args["hlo_op"].startswith("while")
    ):
      op_us += e["dur"]
  if not op_us:
    raise RuntimeError("the trace has no op of the decode executable")
  wall_ms, op_ms = 1e3 * seconds / steps, op_us / 1e3 / steps
  cores = os.cpu_count()
  return {
    "batch": batch,
    "cores": cores,
    "wall_ms_per_step": wall_ms,
    "op_ms_per_step": op_ms,
    "ops_at_once": op_ms / wall_ms,
    "tokens_per_s_all_cores_busy": 1e3 * cores * batch / op_ms,
  }


def decode_by_cache_length(
  model, batch: int, repeats: int, lengths=(128, 320, 1024)
):
  """ms per decode step of a 64-token context in caches of each length.

  The context's span is 128 positions whatever the cache length, so a
  sampler that reads only the span in place costs the same at every
  length. Per-step time is the difference between a 36-token and a
  4-token decode, divided by 32, which cancels the per-call cost.
  """
  rows = list(range(batch))
  prompts = np.random.default_rng(0).integers(
    0, model.config.vocab_size, (batch, 64)
  )

  def seconds(sampler, budget):
    best = float("inf")
    for _ in range(repeats + 1):  # the first call compiles
      sampler.prefill(rows, prompts.tolist())
      jax.block_until_ready(sampler.state)
      start = time.perf_counter()
      sampler.decode(prng_key(0), budget=budget)
      best = min(best, time.perf_counter() - start)
    return best

  out = []
  for max_len in lengths:
    sampler = Sampler(
      model,
      num_slots=batch,
      max_len=max_len,
      budget_buckets=(4, 36),
      **SAMPLER_OPTIONS,
    )
    short, long = seconds(sampler, 4), seconds(sampler, 36)
    out.append(
      {
        "cache_len": max_len,
        "cache_blocks": len(sampler.state.cache.block_lens),
        "step_ms": 1e3 * (long - short) / 32,
        "per_call_ms": 1e3 * (short - 4 * (long - short) / 32),
      }
    )
  return {"batch": batch, "context": 64, "span": 128, "rows": out}


def logit_parity(model, reference, rng) -> float:
  tokens = rng.integers(0, model.config.vocab_size, (2, 48))
  with torch.inference_mode():
    ids = torch.tensor(tokens, device=HF_DEVICE)
    expected = reference(ids).logits.float().cpu().numpy()
  graphdef, state = nnx.split(model)
  forward = jax.jit(lambda s, t: nnx.merge(graphdef, s)(t))
  got = np.asarray(forward(state, tokens))
  return float(np.abs(got - expected).max())


def print_header(header: str) -> None:
  print(header)
  print("-" * len(header))


def print_tables(report: dict) -> None:
  dtype, device = report["config"]["dtype"], report["machine"]["hf_device"]
  print(
    f"\nSampler vs HF generate ({report['preset']}, {dtype}, greedy, {device})"
  )
  header = (
    f"{'batch':>5} {'jax tok/s':>10} {'hf tok/s':>9} {'speedup':>8} "
    f"{'compile s':>9} {'agree':>6} {'2 samplers':>10} {'speedup':>8}"
  )
  print_header(header)
  for r in report["single_turn"]:
    print(
      f"{r['batch']:>5} {r['jax_tokens_per_s']:>10.0f} "
      f"{r['hf_tokens_per_s']:>9.0f} {r['speedup']:>7.2f}x "
      f"{r['jax_compile_seconds']:>9.2f} {r['greedy_token_agreement']:>6.3f}"
      + (
        f" {r['jax_2x_tokens_per_s']:>10.0f} {r['speedup_2x']:>7.2f}x"
        if r["jax_2x_tokens_per_s"]
        else ""
      )
    )
  print(
    "\nRoofline: weight-matmul GFLOP of one generate call at this machine's"
    " peak for those shapes"
  )
  header = (
    f"{'batch':>5} {'GFLOP':>6} {'peak GF/s prefill':>17} "
    f"{'decode':>7} {'bound tok/s':>11} {'max speedup vs HF':>17} "
    f"{'HF GF/s':>8}"
  )
  print_header(header)
  for r in report["single_turn"]:
    m = r["matmul_bound"]
    print(
      f"{r['batch']:>5} {m['weight_matmul_gflop']:>6.2f} "
      f"{m['peak_gflops_prefill']:>17.0f} {m['peak_gflops_decode']:>7.0f} "
      f"{m['tokens_per_s_bound']:>11.0f} {r['max_speedup_over_hf']:>16.2f}x "
      f"{r['hf_gflops']:>8.0f}"
    )
  print(
    "\nWith memory reads: the weights every step and the KV cache each step"
    " attends to, at this machine's stream speed"
  )
  header = (
    f"{'batch':>5} {'read GB':>8} {'GB/s':>6} {'overlapped tok/s':>16} "
    f"{'vs HF':>6} {'not overlapped':>14} {'vs HF':>6}"
  )
  print_header(header)
  for r in report["single_turn"]:
    m = r["matmul_bound"]
    hf = r["hf_tokens_per_s"]
    over = m["tokens_per_s_bound_with_reads"]
    serial = m["tokens_per_s_bound_reads_not_overlapped"]
    print(
      f"{r['batch']:>5} {m['read_gb']:>8.2f} {m['stream_read_gbps']:>6.1f} "
      f"{over:>16.0f} {over / hf:>5.2f}x {serial:>14.0f} {serial / hf:>5.2f}x"
    )
  b = report.get("decode_breakdown")
  if b:
    print(
      f"\nDecode step at batch {b['batch']} (cache {b['cache_len']}), "
      "ms per step"
    )
    for key in (
      "sampler_decode_step_ms",
      "cached_forward_step_ms",
      "forward_without_attention_ms",
      "weight_matmuls_only_ms",
      "weight_matmuls_one_layer_reused_ms",
    ):
      print(f"{key:>34} {b[key]:>7.2f}")
    print(
      f"weight matmuls: {b['weight_matmul_mflop_per_step']:.0f} MFLOP/step, "
      f"{b['weight_matmul_gflops_at_floor']:.0f} GFLOP/s at the floor"
    )
  op_rows = report.get("decode_op_time")
  if op_rows:
    print(
      "\nDecode-step op time (profiler: the decode executable's ops summed "
      "over threads, ms per step); bound: every core busy on those ops"
    )
    header = (
      f"{'batch':>5} {'wall ms':>8} {'op ms':>6} {'ops at once':>11} "
      f"{'bound tok/s':>11} {'vs HF at batch':>14}"
    )
    print_header(header)
    hf = {r["batch"]: r["hf_tokens_per_s"] for r in report["single_turn"]}
    top = max(r["batch"] for r in op_rows)
    for r in op_rows:
      bound = r["tokens_per_s_all_cores_busy"]
      vs = f"{bound / hf[top]:.2f}x {top}" if top in hf else ""
      print(
        f"{r['batch']:>5} {r['wall_ms_per_step']:>8.2f} "
        f"{r['op_ms_per_step']:>6.2f} {r['ops_at_once']:>11.2f} "
        f"{bound:>11.0f} {vs:>14}"
      )
  d = report["decode_by_cache_length"]
  print(
    f"\nDecode step at batch {d['batch']}, {d['context']}-token context "
    f"(span {d['span']}), by cache length"
  )
  header = f"{'cache':>6} {'blocks':>6} {'ms/step':>8} {'ms/call':>8}"
  print_header(header)
  for r in d["rows"]:
    print(
      f"{r['cache_len']:>6} {r['cache_blocks']:>6} {r['step_ms']:>8.3f} "
      f"{r['per_call_ms']:>8.2f}"
    )
  m = report["multi_turn"]
  print(
    f"\nMulti-turn: {m['trajectories']} trajectories x {m['turns']} turns "
    f"({m['generated_per_turn']} generated + "
    f"{m['observation_tokens_per_turn']} observation tokens per turn)"
  )
  header = f"{'mode':>14} {'seconds':>8} {'gen tok/s':>10}"
  print_header(header)
  for name, r in m["modes"].items():
    print(
      f"{name:>14} {r['seconds']:>8.3f} {r['generated_tokens_per_s']:>10.0f}"
    )
  print(
    f"cache vs re-prefill: {m['cache_vs_reprefill_speedup']:.2f}x best-of "
    f"({m['cache_vs_reprefill_paired_median']:.2f}x median of paired "
    "rounds), "
    f"cache vs HF: {m['cache_vs_hf_speedup']:.2f}x, "
    f"cache == re-prefill tokens: {m['cache_equals_reprefill_tokens']}"
  )
  ab = report.get("layout_ab")
  if ab:
    print("\nKernel layouts, in turns: in-first (default) vs out-first")
    header = (
      f"{'workload':>20} {'in-first s':>10} {'out-first s':>11} "
      f"{'paired speedup':>14} {'same tokens':>11}"
    )
    print_header(header)
    for name, r in ab.items():
      print(
        f"{name:>20} {r['in_first_seconds']:>10.3f} "
        f"{r['out_first_seconds']:>11.3f} "
        f"{r['paired_median_speedup']:>13.2f}x {r['same_tokens']!s:>11}"
      )
  kv = report["kv_cache"]
  print(
    f"\nKV cache per slot (max_len {kv['max_len']}): {kv['measured_bytes']} "
    f"bytes measured, {kv['analytic_bytes']} analytic, "
    f"equal: {kv['equal']}"
  )
  print(f"max |logit diff| vs HF: {report['logit_max_abs_diff']:.2e}")
  if mem := report.get("accelerator_memory"):
    gib = lambda b: "n/a" if b is None else f"{b / 2**30:.2f} GiB"  # noqa: E731
    print(
      f"accelerator memory peak: JAX {gib(mem['jax_peak_bytes'])} "
      f"(limit {gib(mem['jax_bytes_limit'])}), torch "
      f"{gib(mem['torch_peak_bytes'])}"
    )
  for name, ok in report["targets"].items():
    print(f"target {name}: {'met' if ok else 'MISSED'}")


def main(argv: list[str]) -> None:
  parser = argparse.ArgumentParser(prog="bench.py sampler")
  parser.add_argument("--out", default=str(DEFAULT_OUT))
  parser.add_argument("--repeats", type=int, default=5)
  parser.add_argument("--batches", default="1,8,32")
  parser.add_argument(
    "--breakdown_batch",
    type=int,
    default=0,
    help="batch of the decode-step breakdown (default: the largest batch)",
  )
  parser.add_argument(
    "--kernels_out_first",
    action="store_true",
    help="samplers hold Dense kernels out-dims first "
    "(Sampler(kernels_out_first=True))",
  )
  parser.add_argument(
    "--layout_ab",
    action="store_true",
    help="also time both kernel layouts in turns (`layout_ab`)",
  )
  parser.add_argument(
    "--preset",
    default=PRESET,
    help="a Qwen3-family model preset (default: the issue's qwen3-bench)",
  )
  parser.add_argument(
    "--dtype",
    default="float32",
    choices=("float32", "bfloat16"),
    help="weights and compute of both sides",
  )
  parser.add_argument("--trajectories", type=int, default=8)
  parser.add_argument("--turns", type=int, default=5)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument(
    "--quick", action="store_true", help="smoke run: batch 1 and 2 turns"
  )
  parser.add_argument(
    "--hf_device",
    default="cpu",
    help="torch device of the HF side: cpu, or cuda beside a JAX GPU",
  )
  args = parser.parse_args(argv)
  global HF_DEVICE
  HF_DEVICE = torch.device(args.hf_device)
  SAMPLER_OPTIONS["kernels_out_first"] = args.kernels_out_first
  if HF_DEVICE.type != "cpu":
    if jax.default_backend() == "cpu":
      raise SystemExit(
        f"--hf_device={args.hf_device} but JAX has no accelerator: both "
        "sides must run on the same kind of device"
      )
    # Full float32 on both sides: torch does not use TF32 by default.
    jax.config.update("jax_default_matmul_precision", "highest")
  batches = [int(b) for b in args.batches.split(",")]
  if args.quick:
    batches, args.turns, args.repeats, args.trajectories = [1], 2, 1, 2

  config = models.get_preset(
    args.preset, dtype=args.dtype, param_dtype=args.dtype
  )
  reference = hf_reference(config, args.seed)
  model = nnx_copy(reference, config)
  rng = np.random.default_rng(args.seed)

  report = {
    "preset": args.preset,
    "config": {
      k: v for k, v in vars(config).items() if not k.startswith("rope_sc")
    },
    "machine": {
      "platform": platform.platform(),
      "cpu_count": os.cpu_count(),
      "jax_backend": jax.default_backend(),
      "jax_devices": jax.device_count(),
      "jax_device_kind": jax.devices()[0].device_kind,
      "hf_device": str(HF_DEVICE),
      "hf_device_name": (
        torch.cuda.get_device_name(HF_DEVICE)
        if HF_DEVICE.type == "cuda"
        else platform.processor()
      ),
      "torch_threads": torch.get_num_threads(),
      "xla_flags": os.environ.get("XLA_FLAGS", ""),
      "jax": jax.__version__,
      "torch": torch.__version__,
      "transformers": transformers.__version__,
    },
    "command": "python scripts/bench.py sampler " + " ".join(argv),
    "sampler_options": dict(SAMPLER_OPTIONS),
    "logit_max_abs_diff": logit_parity(model, reference, rng),
  }
  report["single_turn"] = [
    single_turn(model, reference, b, 64, 64, args.repeats, rng) for b in batches
  ]
  report["multi_turn"] = multi_turn(model, reference, args, rng)
  if not args.quick:
    batch = args.breakdown_batch or max(batches)
    report["decode_breakdown"] = decode_breakdown(model, batch, args.repeats)
  if not args.quick and jax.default_backend() == "cpu":
    # The whole batch in one sampler, and half of it (one of two samplers);
    # op time summed over CPU threads, a measure for CPUs only.
    report["decode_op_time"] = [
      decode_op_time(model, b) for b in sorted({batch, max(batch // 2, 1)})
    ]
  report["decode_by_cache_length"] = decode_by_cache_length(
    model,
    batch=args.trajectories,
    repeats=args.repeats,
    lengths=(128, 320) if args.quick else (128, 320, 1024),
  )
  if args.layout_ab:
    report["layout_ab"] = layout_ab(model, args, rng)
  last = report["single_turn"][-1]
  report["kv_cache"] = {
    "max_len": 128,
    "measured_bytes": last["kv_cache_bytes_per_slot"],
    "analytic_bytes": last["kv_cache_bytes_analytic"],
    "equal": last["kv_cache_bytes_per_slot"] == last["kv_cache_bytes_analytic"],
  }
  by_batch = {r["batch"]: r for r in report["single_turn"]}
  report["targets"] = {
    "batch32_at_least_3x_hf": bool(
      32 in by_batch
      and max(by_batch[32]["speedup"], by_batch[32]["speedup_2x"] or 0) >= 3
    ),
    "multi_turn_cache_at_least_2x_reprefill": bool(
      report["multi_turn"]["cache_vs_reprefill_speedup"] >= 2.0
    ),
    "kv_cache_bytes_analytic": report["kv_cache"]["equal"],
  }
  if HF_DEVICE.type == "cuda":
    # Peak accelerator memory of each side over the whole run.
    stats = jax.devices()[0].memory_stats() or {}
    report["accelerator_memory"] = {
      "jax_peak_bytes": stats.get("peak_bytes_in_use"),
      "jax_bytes_limit": stats.get("bytes_limit"),
      "torch_peak_bytes": torch.cuda.max_memory_allocated(HF_DEVICE),
    }
  print_tables(report)
  out = pathlib.Path(args.out)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(report, indent=2, default=str) + "\n")
  print(f"\nwrote {out}")
