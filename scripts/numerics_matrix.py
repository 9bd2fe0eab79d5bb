"""Does the numerics probe tell which launches repeat each other's runs?

  python scripts/numerics_matrix.py --out=/tmp/numerics \
      [--config=configs/sokoban.py:gigpo,smoke] [--settings=native,avx2] \
      [--json experiments/numerics_probe/matrix.json]

Trains the same config and seed once per launch setting, each a fresh
process with its own compilation cache: this machine as it is (twice),
XLA:CPU's instruction set capped at AVX-512, AVX2, AVX and SSE4.2 (the
kernels other CPUs get), and the process pinned to one core (another
thread count). Every run records its machine (`machine.describe`: the
`numerics_key` and the measured `numerics_probe`). Each run is then
compared with the first, `report.prefix_match` (every logged value but
wall-clock readings, every kept verdict, over the RL steps), and the
table says, per setting, whether the key, the probe and the run agree
with the first. The probe is right about a setting when "same probe"
equals "same run"; the key when "same key" does.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

# The repository root, for `agentic_rl` run from a checkout.
REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agentic_rl import report  # noqa: E402

# name -> (extra XLA_FLAGS, CPUs to pin the process to or None); the
# first setting run is the one the others are compared with.
SETTINGS = {
  "native": ("", None),
  "native_again": ("", None),
  "isa_avx512": ("--xla_cpu_max_isa=AVX512", None),
  "isa_avx2": ("--xla_cpu_max_isa=AVX2", None),
  "isa_avx": ("--xla_cpu_max_isa=AVX", None),
  "isa_sse4_2": ("--xla_cpu_max_isa=SSE4_2", None),
  "one_core": ("", {0}),
}


def launch(
  config: str, out: pathlib.Path, name: str, flags: str, cpus: set[int] | None
) -> tuple[pathlib.Path, float]:
  """Trains `config` in a fresh process under the setting; its workdir and
  wall seconds. A failed run raises with the end of its log."""
  workdir = out / name
  if workdir.exists():  # the loop would resume it instead of training
    raise FileExistsError(f"{workdir} exists: pick a fresh --out")
  env = {
    **os.environ,
    "XLA_FLAGS": " ".join(f for f in (os.environ.get("XLA_FLAGS"), flags) if f),
    "JAX_COMPILATION_CACHE_DIR": str(workdir) + "_jax_cache",
  }
  start = time.perf_counter()
  done = subprocess.run(
    [sys.executable, "-m", "agentic_rl.main", f"--config={config}"]
    + [f"--workdir={workdir}"],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
  )
  if done.returncode:
    raise RuntimeError(f"{name}: exit {done.returncode}\n{done.stderr[-2000:]}")
  return workdir, time.perf_counter() - start


def machine_record(workdir: pathlib.Path) -> dict:
  """The run's last machine record (summary.json)."""
  summary = json.loads((workdir / "summary.json").read_text())
  return summary["machines"][-1]


def matrix(config: str, out: pathlib.Path, names: list[str]) -> list[dict]:
  """One row per setting of `names` this machine can run (pinning needs
  two cores or more), each compared with the first."""
  rows = []
  for name in names:
    flags, cpus = SETTINGS[name]
    here = os.sched_getaffinity(0)
    if cpus and (len(here) < 2 or not cpus <= here):
      print(f"skipped {name}: the process has CPUs {sorted(here)}")
      continue
    workdir, seconds = launch(config, out, name, flags, cpus)
    record = machine_record(workdir)
    first = rows[0] if rows else None
    match = report.prefix_match(first["workdir"], workdir) if first else None
    rows.append(
      {
        "setting": name,
        "workdir": str(workdir),
        "seconds": round(seconds, 1),
        "key": record["key"],
        "probe": record["probe"],
        "probe_parts": record["probe_parts"],
        "same_key": first is None or record["key"] == first["key"],
        "same_probe": first is None or record["probe"] == first["probe"],
        "same_run": first is None or match["first_difference"] is None,
        "steps": match and match["steps"],
        "values": match and match["values"],
        "first_difference": match and match["first_difference"],
      }
    )
  return rows


def table(rows: list[dict]) -> str:
  yes = {True: "yes", False: "no"}
  lines = [
    "| setting | same key | same probe | same run | steps, values compared"
    " | first difference | probe right? | key right? | s |",
    "|---|---|---|---|---|---|---|---|---|",
  ]
  for r in rows[1:]:
    d = r["first_difference"]
    where = f"step {d['step']} `{d['key']}`" if d else ""
    lines.append(
      f"| {r['setting']} | {yes[r['same_key']]} | {yes[r['same_probe']]} "
      f"| {yes[r['same_run']]} | 0-{r['steps']}, {r['values']} | {where} "
      f"| {yes[r['same_probe'] == r['same_run']]} "
      f"| {yes[r['same_key'] == r['same_run']]} | {r['seconds']} |"
    )
  return "\n".join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out", required=True, type=pathlib.Path)
  parser.add_argument("--config", default="configs/sokoban.py:gigpo,smoke")
  parser.add_argument(
    "--settings", default=",".join(SETTINGS), help=f"of {list(SETTINGS)}"
  )
  parser.add_argument("--json", type=pathlib.Path)
  args = parser.parse_args()
  names = args.settings.split(",")
  if unknown := [n for n in names if n not in SETTINGS]:
    parser.error(f"unknown settings {unknown}; known: {list(SETTINGS)}")
  args.out.mkdir(parents=True, exist_ok=True)
  rows = matrix(args.config, args.out, names)
  print(f"against '{rows[0]['setting']}' ({args.config}):\n")
  print(table(rows))
  right = sum(r["same_probe"] == r["same_run"] for r in rows[1:])
  keyed = sum(r["same_key"] == r["same_run"] for r in rows[1:])
  print(
    f"\nprobe right about {right} of {len(rows) - 1} settings,"
    f" key about {keyed}"
  )
  if args.json:
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
      json.dumps({"config": args.config, "rows": rows}, indent=1)
    )


if __name__ == "__main__":
  main()
