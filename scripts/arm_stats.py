"""Per-arm training statistics of a sweep root (the report's companion).

  python scripts/arm_stats.py experiments/sokoban_dynamic/runs \
      [--env=sokoban] [--seeds=0,1,2,3] \
      [--json experiments/sokoban_dynamic/arm_stats.json]

For every arm of `<root>/<env>/<arm>/seed<k>`: the seeds finished, and
over their RL steps (a run's steps averaged, then the runs): episodes
played a step, the fraction of played groups with mixed success, the
update's mean |advantage| (and its divisor under `rl.advantage_scale`),
KL to the SFT policy, gradient norm, the fraction of updates whose
gradient `max_grad_norm` clipped (runs that log it), dynamic sampling's
rounds a step; the median KL and gradient norm over the steps (one
spiking update, as seed 5's first on Sokoban, moves a mean but not
these); the run's largest KL and smallest divisor (its most amplified
step); and the run's wall time and peak resident memory
(`sweep_timing.json`, the memory where recorded). `--seeds` keeps those
seeds only (arms run on different seed counts are then averaged over the
same ones). The held-out numbers are the sweep report's.
"""

import argparse
import json
import pathlib
import sys

import numpy as np

# The repository root, for `agentic_rl` run from a checkout.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from agentic_rl import report  # noqa: E402

KEYS = (
  "episodes",
  "groups/mixed_success",
  "adv_abs_mean",
  "adv_divisor",
  "kl",
  "grad_norm",
  "grad_clipped",
  "dynamic/rounds",
)
# Also as `<key>_median`: a run's median over its steps.
MEDIAN_KEYS = ("kl", "grad_norm")
# Also as `<key>_<name>`: a run's extreme over its steps.
EXTREME_KEYS = (("kl", "max", np.max), ("adv_divisor", "min", np.min))


def run_means(run: pathlib.Path) -> dict[str, float]:
  """Mean of each KEYS metric over a run's RL steps (`report.rl_rows`: a
  resumed run's rewrite of a step wins), the median of each MEDIAN_KEYS
  one and the extreme of each EXTREME_KEYS one, plus its wall time in
  seconds and peak resident memory in MiB where the sweep runner recorded
  them."""
  logged = report.rl_rows(report.read_metrics(run / "logs" / "metrics.jsonl"))
  rows = [r for r in logged if "episodes" in r]  # rollout steps, not evals
  out = {
    k: float(np.mean([r[k] for r in rows]))
    for k in KEYS
    if rows and all(k in r for r in rows)
  }
  for k in MEDIAN_KEYS:
    if k in out:
      out[f"{k}_median"] = float(np.median([r[k] for r in rows]))
  for k, name, fn in EXTREME_KEYS:
    if k in out:
      out[f"{k}_{name}"] = float(fn([r[k] for r in rows]))
  timed = report.read_timing(run)
  if timed:
    out["seconds"] = float(timed["seconds"])
    if timed.get("peak_rss_mib"):
      out["peak_rss_mib"] = float(timed["peak_rss_mib"])
  return out


def arm_stats(
  root: pathlib.Path, env: str = "sokoban", seeds: set[int] | None = None
) -> dict[str, dict]:
  """Arm -> {"seeds": [...], metric: mean over the seeds' run means}, over
  the finished runs of `seeds` (all when None)."""
  stats = {}
  for arm_dir in sorted((root / env).iterdir()):
    runs = sorted(
      d
      for d in arm_dir.glob("seed*")
      if (d / "summary.json").is_file()
      and (seeds is None or int(d.name[4:]) in seeds)
    )
    if arm_dir.name == "sft" or not runs:
      continue
    means = [run_means(d) for d in runs]
    keys = set.intersection(*(set(m) for m in means))
    stats[arm_dir.name] = {
      "seeds": [int(d.name[4:]) for d in runs],
      **{k: float(np.mean([m[k] for m in means])) for k in sorted(keys)},
    }
  return stats


def table(stats: dict[str, dict]) -> str:
  medians = tuple(f"{k}_median" for k in MEDIAN_KEYS)
  extremes = tuple(f"{k}_{name}" for k, name, _ in EXTREME_KEYS)
  cols = ("seconds", "peak_rss_mib", *KEYS, *medians, *extremes)
  lines = [
    "| arm | seeds | " + " | ".join(cols) + " |",
    "|---|---|" + "---|" * len(cols),
  ]
  for arm, s in stats.items():
    cells = [f"{s[c]:.3g}" if c in s else "–" for c in cols]
    lines.append(f"| {arm} | {len(s['seeds'])} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("root", type=pathlib.Path)
  parser.add_argument("--env", default="sokoban")
  parser.add_argument("--json", type=pathlib.Path)
  parser.add_argument("--seeds", help="comma-separated seeds (default all)")
  args = parser.parse_args()
  seeds = {int(s) for s in args.seeds.split(",")} if args.seeds else None
  stats = arm_stats(args.root, args.env, seeds=seeds)
  print(table(stats))
  if args.json:
    args.json.write_text(json.dumps(stats, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
  main()
