"""Machine records: /proc/cpuinfo parsing, the numerics key, and the loop's
per-launch record."""

import jax
import pytest

from agentic_rl import machine
from agentic_rl.train import loop

CPUINFO = """\
processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 26
model\t\t: 2
model name\t: AMD EPYC 9R45
flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512bw avx512vl avx512_bf16 sha_ni

processor\t: 1
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
flags\t\t: fpu avx2 amx_tile
"""


def _record(**changes):
  desc = {
    **machine.cpu_info(CPUINFO),
    "host_cpus": 2,
    "jax": "0.10.2",
    "jaxlib": "0.10.2",
    "backend": "cpu",
    "device_kind": "cpu",
    "device_count": 1,
    "xla_flags": "",
    "platform": "Linux-6.8",
    "python": "3.12.3",
  }
  desc.update(changes)
  return desc


def test_cpu_info_reads_the_first_processor():
  info = machine.cpu_info(CPUINFO)
  assert info == {
    "cpu_vendor": "AuthenticAMD",
    "cpu_family": "26",
    "cpu_model": "2",
    "cpu_name": "AMD EPYC 9R45",
    # In ISA_FLAGS order; sha_ni and fpu are not kernel-choice flags, and
    # the second processor's amx_tile is not read.
    "isa": [
      "sse4_2",
      "avx",
      "avx2",
      "fma",
      "avx512f",
      "avx512bw",
      "avx512vl",
      "avx512_bf16",
    ],
  }
  assert machine.cpu_info("")["isa"] == []


def test_numerics_key_follows_what_decides_the_floats():
  base = machine.numerics_key(_record())
  assert len(base) == 16 and base == machine.numerics_key(_record())
  # What XLA's kernels and results depend on changes the key ...
  for field, value in [
    ("isa", ["avx2"]),
    ("cpu_family", "25"),
    ("xla_flags", "--xla_cpu_use_thunk_runtime=false"),
    ("jaxlib", "0.10.3"),
    ("host_cpus", 8),
    ("device_count", 8),
  ]:
    assert machine.numerics_key(_record(**{field: value})) != base, field
  # ... names, host details and the Python version do not.
  for field, value in [
    ("cpu_name", "AMD EPYC"),
    ("platform", "Linux-5.15"),
    ("python", "3.11.0"),
  ]:
    assert machine.numerics_key(_record(**{field: value})) == base, field
  record = _record()
  del record["xla_flags"]
  with pytest.raises(KeyError, match="xla_flags"):
    machine.numerics_key(record)


def test_describe_this_machine():
  here = machine.describe()
  assert here["key"] == machine.numerics_key(here)
  assert here["backend"] == jax.default_backend() and here["host_cpus"] >= 1
  assert "cores" in machine.short_name(here)
  label = machine.short_name(_record())
  assert label.startswith(
    "AMD EPYC 9R45 (family 26, model 2), 2 cores, avx512f"
  )


def test_record_machine_appends_a_launch_only_on_a_new_machine():
  a = {**_record(), "key": "a" * 16}
  b = {**_record(isa=["avx2"]), "key": "b" * 16}
  host = {"phase": "sft", "sft_step": 0, "rl_step": 0}
  loop.record_machine(host, a)
  assert [(m["key"], m["phase"]) for m in host["machines"]] == [
    (a["key"], "sft")
  ]
  assert "unrecorded_before" not in host["machines"][0]
  host.update(phase="rl", rl_step=7)
  loop.record_machine(host, a)  # resumed on the same machine: nothing new
  assert len(host["machines"]) == 1
  loop.record_machine(host, b)  # resumed on another: where it stood
  assert [(m["key"], m["rl_step"]) for m in host["machines"]] == [
    (a["key"], 0),
    (b["key"], 7),
  ]
  # A checkpoint from before machine records: the start is unrecorded.
  old = {"phase": "rl", "sft_step": 40, "rl_step": 3}
  loop.record_machine(old, a)
  assert old["machines"][0]["unrecorded_before"] is True
