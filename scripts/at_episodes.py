"""Held-out success of a sweep's arms at fixed budgets of training episodes.

  python scripts/at_episodes.py experiments/sokoban_budget/runs \
      --episodes=1920,3840,5760 [--env=sokoban] [--arms=gigpo_long,...] \
      [--json experiments/sokoban_budget/at_episodes.json]

The sweep report compares two arms at the most episodes both played; this
reads every arm at each budget given (`report.success_at_episodes`:
linearly between a run's evaluations, only where the run reached the
budget), averages over seeds with a 95% t-interval, and pairs each arm
with the first one listed (`--arms`, default the sweep's estimators in
order) on the seeds both ran to that budget. Arms that play different
numbers of episodes a step (wider steps, dynamic sampling, more RL
steps) are then compared on the same data at several points of a run.
"""

import argparse
import json
import pathlib
import sys

# The repository root, for `agentic_rl` run from a checkout.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from agentic_rl import report  # noqa: E402


def at_episodes(
  curves: list[report.RunCurve], arms: list[str], budgets: list[float]
) -> dict[str, dict]:
  """Arm -> budget -> {"per_seed", "success" (t-interval over seeds),
  "vs_first" (paired Δ against arms[0] where both reached it, else None)},
  over the arms' runs that reached each budget."""
  by_arm: dict[str, dict[int, dict[float, float]]] = {a: {} for a in arms}
  for c in curves:
    if c.estimator in by_arm:
      by_arm[c.estimator][c.seed] = report.success_at_episodes(c, budgets)

  def reached(arm: str, e: float) -> dict[int, float]:
    return {s: r[e] for s, r in by_arm[arm].items() if e in r}

  firsts = {e: reached(arms[0], e) for e in budgets}
  out: dict[str, dict] = {}
  for arm in arms:
    out[arm] = {}
    for e in budgets:
      seeds = reached(arm, e)
      if not seeds:
        continue
      vs = None
      if arm != arms[0] and set(seeds) & set(firsts[e]):
        vs = report.paired_difference(seeds, firsts[e]).to_dict()
      out[arm][label(e)] = {
        "per_seed": {str(s): v for s, v in sorted(seeds.items())},
        "success": report.t_interval(list(seeds.values())).to_dict(),
        "vs_first": vs,
      }
  return out


def label(episodes: float) -> str:
  """A budget as its JSON key and column name: 1920.0 -> "1920"."""
  return str(int(episodes)) if float(episodes).is_integer() else str(episodes)


def _ci(stat: dict, sign: str = "") -> str:
  """In points: mean [lo, hi]; `sign="+"` for differences."""
  mean = f"{100 * stat['mean']:{sign}.1f}"
  if stat["lo"] is None:
    return f"{mean} (no CI)"
  return f"{mean} [{100 * stat['lo']:{sign}.1f}, {100 * stat['hi']:{sign}.1f}]"


def table(stats: dict[str, dict], budgets: list[str]) -> str:
  first = next(iter(stats))
  lines = [
    "| arm | "
    + " | ".join(f"{b} episodes | Δ vs {first}" for b in budgets)
    + " |",
    "|---|" + "---|---|" * len(budgets),
  ]
  for arm, row in stats.items():
    cells = []
    for b in budgets:
      r = row.get(b)
      if r is None:
        cells.append("– | –")
        continue
      n = len(r["per_seed"])
      vs = "(first)" if arm == first else "–"
      if r["vs_first"] is not None:
        vs = f"{_ci(r['vs_first'], sign='+')} (n={r['vs_first']['n']})"
      cells.append(f"{_ci(r['success'])} (n={n}) | {vs}")
    lines.append(f"| {arm} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("root", type=pathlib.Path)
  parser.add_argument("--episodes", required=True, help="comma-separated")
  parser.add_argument("--env", default=None, help="default: the only env")
  parser.add_argument("--arms", help="comma-separated (default: the sweep's)")
  parser.add_argument("--json", type=pathlib.Path)
  args = parser.parse_args()
  manifest, grid, _, _ = report.load_sweep(args.root)
  env = args.env or next(iter(manifest["envs"]))
  arms = args.arms.split(",") if args.arms else list(manifest["estimators"])
  budgets = [float(e) for e in args.episodes.split(",")]
  stats = at_episodes([c for c in grid if c.env == env], arms, budgets)
  print(
    f"{env}: held-out success in points at equal training episodes, mean"
    " [95% t-interval] over seeds (n), and paired Δ against the first arm:\n"
  )
  print(table(stats, [label(b) for b in budgets]))
  if args.json:
    args.json.write_text(json.dumps(stats, indent=2) + "\n")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
  main()
