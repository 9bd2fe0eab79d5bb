"""Which machine a run used, and whether two runs can agree to the last bit.

A training run is deterministic on one machine, but not across machines:
XLA:CPU picks its kernels by the instruction set it finds (AVX2, AVX-512,
AMX), so the same config and seed on another CPU differs in the last bits of
its first losses, and RL amplifies that (on Sokoban, one seed's step-30
held-out success moved 5-7 points between an Intel and a Zen 5 VM). So every
run records the machine of each launch (`describe`), and the report flags
paired comparisons whose two runs did not share one (`numerics_key`).

`numerics_key` hashes only what decides the floats: CPU vendor, family,
model and instruction set, the host cores XLA's thread pool may use, jax
and jaxlib versions, the backend, its devices and `XLA_FLAGS`. Host names,
clock speeds and memory are left out: two VMs of one CPU model give the
same numbers.
"""

from __future__ import annotations

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


def describe(cpuinfo_path: str = "/proc/cpuinfo") -> dict[str, Any]:
  """This process's machine: CPU, cores, library versions, backend, flags,
  and its `numerics_key` under "key"."""
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
  return {**desc, "key": numerics_key(desc)}


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
