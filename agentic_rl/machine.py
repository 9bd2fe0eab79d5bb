"""Which machine a run used, and whether two runs can agree to the last bit.

A training run is deterministic on one machine, but not across machines:
XLA:CPU picks its kernels by the instruction set it finds (AVX2, AVX-512,
AMX), so the same config and seed on another CPU differs in the last bits of
its first losses, and RL amplifies that (on Sokoban, one seed's step-30
held-out success moved 5-7 points between an Intel and a Zen 5 VM). So every
run records the machine of each launch (`describe`), and the report flags
paired comparisons whose two runs did not share one (`numerics_key`),
counting those whose machines' `numerics_probe`s agree.

`numerics_key` hashes only what decides the floats: CPU vendor, family,
model and instruction set, the host cores XLA's thread pool may use, jax
and jaxlib versions, the backend, its devices and `XLA_FLAGS`. Host names,
clock speeds and memory are left out: two VMs of one CPU model give the
same numbers.

The key is a description, so it can be wrong both ways; `numerics_probe` is
a measurement: digests of a small training workload run in the process. On
one Zen 4 VM (2026-12-06), capping XLA's instruction set at AVX2, AVX or
SSE4.2, or pinning the process to one core, changed both the probe and a
smoke run's SFT updates, and capping it at AVX-512 (another key) changed
neither (`experiments/numerics_probe/`).

Measuring the probe takes 15-30 s on a 2-core CPU, so a launcher may hand
its own to the processes it starts (`probe_environ`; scripts/sweep.py
measures it in one child and hands it to its runs, `sweeps.
probe_environ`): a child takes it only on the same host, with the same
`numerics_key` (so the same `XLA_FLAGS` and usable cores) and the same
JAX_*/XLA_* settings, and measures its own otherwise. A new process on one
machine measures the same digests (tests/test_machine.py), so the handed
probe is the one the child would measure; its record says it was handed
("probe_inherited").
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import platform
from typing import Any

# /proc/cpuinfo flags XLA:CPU's kernel choice depends on.
ISA_FLAGS = (
  "sse4_2",
  "avx",
  "avx2",
  "fma",
  "f16c",
  "avx512f",
  "avx512bw",
  "avx512vl",
  "avx512_vnni",
  "avx512_bf16",
  "avx512_fp16",
  "amx_tile",
  "amx_bf16",
  "amx_int8",
)
NUMERICS_FIELDS = (
  "cpu_vendor",
  "cpu_family",
  "cpu_model",
  "isa",
  "host_cpus",
  "jax",
  "jaxlib",
  "backend",
  "device_kind",
  "device_count",
  "xla_flags",
)


def cpu_info(text: str) -> dict[str, Any]:
  """Vendor, family, model, model name and ISA of the first processor in a
  /proc/cpuinfo text (empty strings where a field is missing)."""
  first: dict[str, str] = {}
  for line in text.splitlines():
    if not line.strip():
      if first:
        break
      continue
    key, sep, value = line.partition(":")
    if sep:
      first.setdefault(key.strip(), value.strip())
  flags = set(first.get("flags", "").split())
  return {
    "cpu_vendor": first.get("vendor_id", ""),
    "cpu_family": first.get("cpu family", ""),
    "cpu_model": first.get("model", ""),
    "cpu_name": first.get("model name", ""),
    "isa": [f for f in ISA_FLAGS if f in flags],
  }


def _host_cpus() -> int:
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not on Linux
    return os.cpu_count() or 0


def describe(
  cpuinfo_path: str = "/proc/cpuinfo", probe: bool = True
) -> dict[str, Any]:
  """This process's machine: CPU, cores, library versions, backend, flags,
  its `numerics_key` under "key" and, with `probe`, its `numerics_probe`
  under "probe" (the three parts' digests under "probe_parts"; whether the
  launcher handed it over, `probe_environ`, under "probe_inherited")."""
  import jax
  import jaxlib

  path = pathlib.Path(cpuinfo_path)
  cpu = (
    cpu_info(path.read_text())
    if path.is_file()
    else {
      "cpu_vendor": "",
      "cpu_family": "",
      "cpu_model": "",
      "cpu_name": platform.processor() or platform.machine(),
      "isa": [],
    }
  )
  desc = {
    **cpu,
    "host_cpus": _host_cpus(),
    "jax": jax.__version__,
    "jaxlib": jaxlib.__version__,
    "backend": jax.default_backend(),
    "device_kind": jax.devices()[0].device_kind,
    "device_count": jax.device_count(),
    "xla_flags": os.environ.get("XLA_FLAGS", ""),
    "platform": platform.platform(),
    "python": platform.python_version(),
  }
  desc["key"] = numerics_key(desc)
  if probe:
    parts = dict(numerics_probe())
    desc["probe_inherited"] = parts.pop("inherited", False)
    desc["probe"] = parts.pop("probe")
    desc["probe_parts"] = parts
  return desc


def numerics_key(desc: dict[str, Any]) -> str:
  """16 hex digits over `NUMERICS_FIELDS` of a `describe()` record."""
  missing = [f for f in NUMERICS_FIELDS if f not in desc]
  if missing:
    raise KeyError(f"machine record lacks {missing}")
  blob = json.dumps([desc[f] for f in NUMERICS_FIELDS], sort_keys=True)
  return hashlib.sha256(blob.encode()).hexdigest()[:16]


def short_name(desc: dict[str, Any]) -> str:
  """A one-line label: CPU name (family/model), cores, ISA top, backend."""
  isa = desc.get("isa") or []
  top = next(
    (f for f in ("amx_tile", "avx512f", "avx2", "avx") if f in isa), "base"
  )
  fam = (
    f" (family {desc['cpu_family']}, model {desc['cpu_model']})"
    if desc.get("cpu_family")
    else ""
  )
  flags = f", XLA_FLAGS={desc['xla_flags']!r}" if desc.get("xla_flags") else ""
  return (
    f"{desc.get('cpu_name') or 'unknown CPU'}{fam}, {desc.get('host_cpus')} "
    f"cores, {top}, jax {desc.get('jax')} {desc.get('backend')}{flags}"
  )


# The probe's workload: the tiny preset trained a few SFT steps on each of
# two fixed batches, then tokens drawn from its logits as the rollout draws
# them. Both batch shapes are needed: on one Zen 4 VM a probe of the short
# batch alone saw a cap at AVX2 and not a run on one core, of the long batch
# alone the reverse.
# Bump PROBE_VERSION with any change to it (or to the code it runs that
# changes its numbers): probes compare only within a version.
PROBE_ROWS, PROBE_STEPS = 8, 3
PROBE_TURNS = ((12, 8, 64), (96, 64, 512))  # obs, action tokens; length
PROBE_VERSION = 1


def _digest(*trees: Any) -> str:
  """16 hex digits over the bytes (and dtypes, shapes) of every leaf."""
  import jax
  import numpy as np

  h = hashlib.sha256()
  for leaf in jax.tree.leaves(trees):
    a = np.asarray(leaf)
    h.update(f"{a.dtype}{a.shape}".encode())
    h.update(np.ascontiguousarray(a).tobytes())
  return h.hexdigest()[:16]


# The environment variable a launcher's probe reaches its children by, and
# the JAX_*/XLA_* variables that do not change what a process computes.
PROBE_ENV = "AGENTIC_RL_NUMERICS_PROBE"
_NOT_NUMERICS = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_")


class ProbeEnvError(ValueError):
  """`PROBE_ENV` holds something `probe_environ` did not write."""


def _numerics_env() -> dict[str, str]:
  return {
    k: v
    for k, v in sorted(os.environ.items())
    if k.startswith(("JAX_", "XLA_")) and not k.startswith(_NOT_NUMERICS)
  }


def _handed_over() -> dict[str, Any]:
  """What a process launched by this one must match to take its probe."""
  return {
    "version": PROBE_VERSION,
    "host": platform.node(),
    "key": describe(probe=False)["key"],
    "env": _numerics_env(),
  }


def probe_environ() -> dict[str, str]:
  """{PROBE_ENV: this process's probe and what it was measured under}: the
  environment a launcher adds to its children's so that those of its host,
  key and JAX/XLA settings take the probe instead of measuring it."""
  probe = dict(numerics_probe())
  probe.pop("inherited", None)
  return {PROBE_ENV: json.dumps({**_handed_over(), "parts": probe})}


def inherited_probe() -> dict[str, str] | None:
  """The probe `PROBE_ENV` hands this process (with "inherited": True), or
  None when there is none or it was measured elsewhere: another host, key,
  probe version or JAX/XLA setting. `ProbeEnvError` when it is malformed."""
  blob = os.environ.get(PROBE_ENV)
  if not blob:
    return None
  try:
    got = json.loads(blob)
    parts = got.pop("parts")
    ok = set(parts) == {"init", "train", "sample", "probe"}
  except (json.JSONDecodeError, AttributeError, KeyError, TypeError) as e:
    raise ProbeEnvError(f"{PROBE_ENV} is not a handed-over probe: {e}") from e
  if not ok:
    raise ProbeEnvError(f"{PROBE_ENV} lacks probe parts: {sorted(parts)}")
  if got != _handed_over():
    return None
  return {**parts, "inherited": True}


@functools.cache
def numerics_probe() -> dict[str, Any]:
  """What this process computes: `measure_numerics_probe`, or the probe its
  launcher handed over (`inherited_probe`; then "inherited": True). Cached
  per process."""
  return inherited_probe() or measure_numerics_probe()


def measure_numerics_probe() -> dict[str, str]:
  """What this process computes, measured: digests of a small workload run
  here, for telling apart machines whose numbers differ in fact.

  `numerics_key` is a guess from the hardware's description, and both ways
  wrong at times: two CPU models may run the same kernels (a Zen 4 and a
  Zen 5 VM repeated each other's Sokoban runs bit for bit over 30 RL steps),
  and a forced instruction set can change a run's floats while leaving the
  description's every field but `xla_flags` as it was. The probe runs what
  training runs, on the tiny preset: the initialiser, `PROBE_STEPS` SFT
  updates (forward, backward, clipping, AdamW) on each of two fixed random
  batches (`PROBE_TURNS`), the updated model's logits on the longer one's
  tokens and tokens sampled from them at temperature 0.7 with top-k and
  top-p. Returns {"init", "train", "sample": digest of that part, "probe":
  "v<PROBE_VERSION>:" and the digest of the three}.

  Processes whose probes differ compute different floats and will not
  repeat each other's runs; equal probes are evidence, not proof, that
  they will (a run's own shapes may compile to kernels the probe's do
  not reach). 15-20 s on a 2-core CPU once its programs are in the
  compilation cache (with the tests' XLA flags), 25-35 s before.
  """
  import jax
  import jax.numpy as jnp
  import numpy as np

  from agentic_rl import sharding as shd
  from agentic_rl.data.packing import pack
  from agentic_rl.models.config import get_preset
  from agentic_rl.sampling import select
  from agentic_rl.train import sft
  from agentic_rl.train import state as st
  from agentic_rl.train import step as sp
  from agentic_rl.types import Task, Trajectory, Turn

  model_config = get_preset("tiny")
  opt = st.OptimizerConfig(
    learning_rate=3e-3, warmup_steps=1, weight_decay=0.01, max_grad_norm=1.0
  )
  mesh = shd.make_mesh((1, 1, 1), jax.local_devices()[:1])
  state, layout = st.create_train_state(model_config, opt, seed=0, mesh=mesh)
  parts = {"init": _digest(state.model.params)}

  rng = np.random.default_rng(0)

  def ids(n: int) -> list[int]:
    return rng.integers(0, model_config.vocab_size, n).tolist()

  def episode(i: int, obs: int, act: int) -> Trajectory:
    return Trajectory(
      task=Task(id=f"probe{i}", family="probe"),
      group_id=i,
      turns=[
        Turn(ids(obs), ids(act), action_logp=[0.0] * act) for _ in range(3)
      ],
    )

  step_fn = sft.make_sft_step(sp.StepConfig(optimizer=opt), layout)
  losses = []
  for obs, act, length in PROBE_TURNS:
    episodes = [episode(i, obs, act) for i in range(PROBE_ROWS)]
    batch = pack(episodes, length_buckets=(length,))
    for _ in range(PROBE_STEPS):
      state, metrics = step_fn(state, batch)
      losses.append(metrics["loss"])
  parts["train"] = _digest(state.model.params, losses)

  logits_BxV = jax.jit(lambda m, t: m.merge()(t)[:, -1])(
    state.model, batch.tokens_BxL
  )
  ones_B = jnp.ones(PROBE_ROWS)
  tokens_B, logp_B = jax.jit(select.select_tokens, static_argnames="filtered")(
    jax.random.key(0),
    logits_BxV,
    0.7 * ones_B,
    (16 * ones_B).astype(jnp.int32),
    0.9 * ones_B,
    filtered=True,
  )
  parts["sample"] = _digest(logits_BxV, tokens_B, logp_B)
  whole = "".join(parts[k] for k in ("init", "train", "sample"))
  parts["probe"] = (
    f"v{PROBE_VERSION}:" + hashlib.sha256(whole.encode()).hexdigest()[:16]
  )
  return parts
