"""Every estimator side by side on one logged multi-turn Sokoban batch.

  python scripts/compare_estimators.py --out experiments/estimator_comparison

Prints a table (scale, sign, advantage on expert vs random turns) and writes
`table.json` and `heatmaps.png` into --out. See `agentic_rl.analysis`.
"""

import argparse
import json
import pathlib

from agentic_rl import analysis


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--out", default="experiments/estimator_comparison")
  parser.add_argument("--tasks", type=int, default=16)
  parser.add_argument("--group_size", type=int, default=8)
  parser.add_argument("--epsilon", type=float, default=0.3)
  parser.add_argument("--difficulty", type=int, default=0)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()

  batch, random_BxT, advs = analysis.compare_on_logged_batch(
    num_tasks=args.tasks,
    group_size=args.group_size,
    epsilon=args.epsilon,
    difficulty=args.difficulty,
    seed=args.seed,
  )
  rows = analysis.credit_table(advs, batch, random_BxT)
  print(
    f"{args.tasks} Sokoban tasks x {args.group_size} trajectories, "
    f"epsilon-expert (epsilon={args.epsilon}), seed {args.seed}\n"
  )
  print(analysis.format_table(rows))
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  (out / "table.json").write_text(
    json.dumps(dict(args=vars(args), rows=rows), indent=2)
  )
  analysis.plot_heatmaps(advs, batch, out / "heatmaps.png")
  print(f"\nwrote {out / 'table.json'} and {out / 'heatmaps.png'}")


if __name__ == "__main__":
  main()
