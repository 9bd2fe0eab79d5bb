"""What the multi-process benchmarks share: workers launched as local
processes of one job, and the JSON report each writes."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Sequence
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]


def worker_lines(
  argv: Sequence[str],
  processes: int,
  *,
  devices_each: int,
  timeout: float,
  what: str,
) -> list[list[dict[str, Any]]]:
  """Runs `argv` as `processes` local processes of one job
  (`sweeps.launch_local_processes`) and returns each process's JSON lines;
  a process that fails is a SystemExit naming it (`what`: the job) with
  the end of its stderr."""
  from agentic_rl import sweeps

  outs = sweeps.launch_local_processes(
    argv, processes, devices_each=devices_each, cwd=ROOT, timeout=timeout
  )
  for i, (code, _, err) in enumerate(outs):
    if code != 0:
      raise SystemExit(f"process {i} of {what} failed:\n{err[-3000:]}")
  return [
    [json.loads(x) for x in out.splitlines() if x[:1] == "{"]
    for _, out, _ in outs
  ]


def write_report(out: str | pathlib.Path, report: dict[str, Any]) -> None:
  """Writes a benchmark's report as JSON (making its folder) and says so."""
  out = pathlib.Path(out)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(report, indent=2))
  print(f"wrote {out}")
