"""Multi-process runs (one JAX controller per host), as two local processes.

Each process gets 4 simulated CPU devices and joins the other through
`jax.distributed` (gloo collectives on CPU), as the hosts of a pod would.
"""

import json
import os
import pathlib
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

from agentic_rl import sweeps
from agentic_rl.train.logging import read_jsonl

REPO = pathlib.Path(__file__).resolve().parents[1]
WORKER = pathlib.Path(__file__).with_name("multiprocess_worker.py")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(devices: int, **extra: str) -> dict[str, str]:
  # The processes talk over 127.0.0.1 only; a proxy setting can hang gRPC's
  # coordinator connection (JAX warns of it), so none is passed on.
  env = {k: v for k, v in os.environ.items() if "_proxy" not in k.lower()}
  count = sweeps.SIMULATED_DEVICES_FLAG
  flags = re.sub(rf"{count}=\d+", "", env.get("XLA_FLAGS", ""))
  env["XLA_FLAGS"] = f"{count}={devices} {flags}"
  env.update(extra)
  return env


def _launch(argv: list[str], n: int = 2, timeout: float = 600) -> list[str]:
  """Runs `argv` as processes 0..n-1 of one job; their stdouts."""
  address = f"127.0.0.1:{_free_port()}"
  procs = [
    subprocess.Popen(
      argv,
      cwd=REPO,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
      env=_env(
        8 // n,
        **{
          sweeps.DISTRIBUTED_ENV: "1",
          "JAX_COORDINATOR_ADDRESS": address,
          sweeps.NUM_PROCESSES_ENV: str(n),
          sweeps.PROCESS_ID_ENV: str(i),
        },
      ),
    )
    for i in range(n)
  ]
  outs = []
  try:
    for p in procs:
      out, err = p.communicate(timeout=timeout)
      assert p.returncode == 0, err[-3000:]
      outs.append(out)
  finally:
    for p in procs:
      p.kill()
  return outs


def test_two_processes_gather_check_and_refuse_a_partial_mesh(tmp_path):
  seen = [
    json.loads(o.strip().splitlines()[-1])
    for o in _launch([sys.executable, str(WORKER), str(tmp_path)])
  ]
  assert [s["process"] for s in seen] == [0, 1]
  assert [s["primary"] for s in seen] == [True, False]
  assert all(s["devices"] == 8 for s in seen)
  for s in seen:
    # rows 0-2 from process 0, 10-12 from process 1, read whole by both
    assert not s["fully_addressable"]
    assert s["gathered"] == [0, 1, 2, 10, 11, 12]
    assert s["replicated_sum"] == 36
    # the default mesh of one device leaves process 1 out: a clear error
    assert "none of process(es) [1]" in s["small_mesh"]
    # equal data passes; rows that differ by process are named
    assert "the test's rows differs between processes" in s["divergence"]
    assert "process(es) [1]" in s["divergence"]
  # Both set the run up and logged a row; only process 0 wrote anything.
  assert (tmp_path / "config.json").is_file()
  logs = tmp_path / "logs"
  assert len(list(logs.glob("*tfevents*"))) == 1
  assert [r["probe_row"] for r in read_jsonl(str(logs / "metrics.jsonl"))] == [
    0
  ]


@pytest.mark.parametrize(
  "environ, message",
  [
    ({sweeps.NUM_PROCESSES_ENV: "2"}, "or neither"),
    ({sweeps.PROCESS_ID_ENV: "0"}, "or neither"),
    (
      {sweeps.NUM_PROCESSES_ENV: "two", sweeps.PROCESS_ID_ENV: "0"},
      "not an integer",
    ),
  ],
)
def test_initialize_distributed_refuses_half_a_launch(environ, message):
  with pytest.raises(sweeps.SweepSpecError, match=message):
    sweeps.initialize_distributed(environ)


def _rows(path: pathlib.Path) -> dict[tuple[int, str], float]:
  out = {}
  for row in read_jsonl(str(path)):
    step, _ = row.pop("step"), row.pop("time")  # phases may share a step
    for k, v in row.items():
      assert (step, k) not in out, f"{k} logged twice at step {step}"
      out[step, k] = v
  return out


@pytest.mark.slow
def test_two_process_run_matches_one_process_on_the_same_mesh(tmp_path):
  """The smoke run (SFT, 2 GiGPO steps, evaluations) on a (2, 1, 4) mesh:
  as two processes of 4 devices it logs once and matches one process of 8
  devices (same programs; the cross-process reductions may round apart)."""
  argv = [
    sys.executable,
    "-m",
    "agentic_rl.main",
    "--config=configs/sokoban.py:gigpo,smoke",
    "--config.mesh.shape=(2,1,4)",
  ]
  _launch([*argv, f"--workdir={tmp_path / 'two'}"], timeout=1200)
  one = subprocess.run(
    [*argv, f"--workdir={tmp_path / 'one'}"],
    cwd=REPO,
    env=_env(8),
    capture_output=True,
    text=True,
    timeout=1200,
  )
  assert one.returncode == 0, one.stderr[-3000:]
  logs = tmp_path / "two" / "logs"
  assert len(list(logs.glob("*tfevents*"))) == 1
  two_rows, one_rows = (
    _rows(logs / "metrics.jsonl"),
    _rows(tmp_path / "one" / "logs" / "metrics.jsonl"),
  )
  assert two_rows.keys() == one_rows.keys()
  timing = re.compile(r"time|second|per_s")
  compared = [k for k in one_rows if not timing.search(k[1])]
  assert len(compared) > 100
  np.testing.assert_allclose(
    [two_rows[k] for k in compared],
    [one_rows[k] for k in compared],
    rtol=1e-4,
    atol=1e-6,
  )
  summaries = [
    json.loads((tmp_path / d / "summary.json").read_text())
    for d in ("two", "one")
  ]
  assert [e["success_rate"] for e in summaries[0]["evals"]] == [
    e["success_rate"] for e in summaries[1]["evals"]
  ]
