"""Machine records: /proc/cpuinfo parsing, the numerics key, and the loop's
per-launch record."""

import json
import os
import pathlib
import platform
import subprocess
import sys

import jax
import pytest

from agentic_rl import machine
from agentic_rl.train import loop

REPO = pathlib.Path(__file__).resolve().parents[1]

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
  probe = machine.numerics_probe()
  assert here["probe"] == probe["probe"]
  assert here["probe_parts"] == {
    k: probe[k] for k in ("init", "train", "sample")
  }
  assert "probe" not in machine.describe(probe=False)
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
  # Same key, but a probe that differs from the record's: recorded.
  host.update(rl_step=9)
  loop.record_machine(host, {**b, "probe": "v1:" + "1" * 16})
  loop.record_machine(host, {**b, "probe": "v1:" + "1" * 16})
  loop.record_machine(host, {**b, "probe": "v1:" + "2" * 16})
  got = [(m["key"], m.get("probe"), m["rl_step"]) for m in host["machines"]]
  assert got[1:] == [
    (b["key"], None, 7),  # a record from before probes
    (b["key"], "v1:" + "1" * 16, 9),
    (b["key"], "v1:" + "2" * 16, 9),
  ]
  # A checkpoint from before machine records: the start is unrecorded.
  old = {"phase": "rl", "sft_step": 40, "rl_step": 3}
  loop.record_machine(old, a)
  assert old["machines"][0]["unrecorded_before"] is True


def _probe_in_subprocess(
  xla_flags: str, calls: tuple[str, ...] = ("numerics_probe",), **env: str
) -> list[dict[str, str]]:
  """What `machine.<call>()` returns, for each call, in one new process."""
  code = "import json; from agentic_rl import machine\n"
  code += "".join(f"print(json.dumps(machine.{c}()))\n" for c in calls)
  done = subprocess.run(
    [sys.executable, "-c", code],
    cwd=REPO,
    env={**os.environ, "XLA_FLAGS": xla_flags, **env},
    capture_output=True,
    text=True,
    check=True,
  )
  return [json.loads(x) for x in done.stdout.splitlines()[-len(calls) :]]


def test_numerics_probe_repeats_in_a_new_process_and_sees_a_capped_isa():
  """Another process of this machine measures the same digests and takes
  the probe this process hands it; one whose XLA may use no more than
  SSE4.2 (kernels another CPU would get) measures others and refuses it."""
  here = machine.numerics_probe()
  assert set(here) == {"init", "train", "sample", "probe"}
  assert here["probe"].startswith(f"v{machine.PROBE_VERSION}:")
  flags = os.environ.get("XLA_FLAGS", "")
  assert os.environ.get(machine.PROBE_ENV) is None  # measured here
  handed = machine.probe_environ()
  # One process for both (a JAX start-up fewer): what it is handed, then
  # what it measures itself.
  taken, measured = _probe_in_subprocess(
    flags, ("numerics_probe", "measure_numerics_probe"), **handed
  )
  assert measured == here
  assert taken == {**here, "inherited": True}
  (capped,) = _probe_in_subprocess(
    f"{flags} --xla_cpu_max_isa=SSE4_2", **handed
  )
  assert "inherited" not in capped
  assert capped["train"] != here["train"]
  assert capped["probe"] != here["probe"]


def _handed(**changes):
  """A probe handed over from a process like this one, as probe_environ
  writes it (fake digests: nothing is measured)."""
  parts = {"init": "a", "train": "b", "sample": "c", "probe": "v1:d"}
  blob = {
    "version": machine.PROBE_VERSION,
    "host": platform.node(),
    "key": machine.describe(probe=False)["key"],
    "env": {
      k: v
      for k, v in os.environ.items()
      if k.startswith(("JAX_", "XLA_"))
      and k != "JAX_COMPILATION_CACHE_DIR"
      and not k.startswith("JAX_PERSISTENT_CACHE_")
    },
    "parts": parts,
    **changes,
  }
  return json.dumps(blob), parts


def test_a_handed_probe_is_taken_only_where_it_was_measured(monkeypatch):
  blob, parts = _handed()
  monkeypatch.setenv(machine.PROBE_ENV, blob)
  assert machine.inherited_probe() == {**parts, "inherited": True}
  # The compilation cache does not change the numbers: still taken.
  monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/elsewhere")
  assert machine.inherited_probe() == {**parts, "inherited": True}
  for changes in (
    {"host": "another-host"},
    {"key": "0" * 16},
    {"version": machine.PROBE_VERSION + 1},
  ):
    monkeypatch.setenv(machine.PROBE_ENV, _handed(**changes)[0])
    assert machine.inherited_probe() is None, changes
  # A JAX setting the launcher did not have (the child's own): measured.
  monkeypatch.setenv(machine.PROBE_ENV, blob)
  monkeypatch.setenv("JAX_DEFAULT_MATMUL_PRECISION", "highest")
  assert machine.inherited_probe() is None
  monkeypatch.delenv(machine.PROBE_ENV)
  assert machine.inherited_probe() is None


@pytest.mark.parametrize(
  "blob, match",
  [
    ("not json", "not a handed-over probe"),
    ('{"key": "abc"}', "not a handed-over probe"),
    ('{"parts": {"init": "a"}}', "lacks probe parts"),
  ],
)
def test_a_malformed_handed_probe_is_a_named_error(monkeypatch, blob, match):
  monkeypatch.setenv(machine.PROBE_ENV, blob)
  with pytest.raises(machine.ProbeEnvError, match=match):
    machine.inherited_probe()


@pytest.mark.slow
def test_numerics_matrix_script_sees_a_capped_isa_in_key_probe_and_run(
  tmp_path,
):
  """scripts/numerics_matrix.py end to end: two smoke runs, as is and with
  XLA capped at SSE4.2; the second differs in key, probe and logged run."""
  out = tmp_path / "json"
  done = subprocess.run(
    [
      sys.executable,
      "scripts/numerics_matrix.py",
      f"--out={tmp_path / 'runs'}",
      "--settings=native,isa_sse4_2",
      f"--json={out}",
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
  )
  assert done.returncode == 0, done.stderr[-2000:]
  first, capped = json.loads(out.read_text())["rows"]
  assert first["probe"] == machine.numerics_probe()["probe"]
  assert (capped["same_key"], capped["same_probe"], capped["same_run"]) == (
    False,
    False,
    False,
  )
  assert capped["first_difference"]["step"] >= 0 and capped["values"] > 0
  assert "| isa_sse4_2 | no | no | no | 0-2," in done.stdout
  assert "probe right about 1 of 1 settings, key about 1" in done.stdout
