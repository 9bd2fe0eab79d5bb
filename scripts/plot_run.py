"""One run's learning curves: `scripts/plot_run.py --workdir=D --out=F.png`.

Reads `<workdir>/logs/metrics.jsonl` and plots held-out (greedy) success
at every evaluation and the training rollouts' success per RL step, with
the RL phase's wall time in the title.
"""

import argparse
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from agentic_rl import report  # noqa: E402


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--out", required=True)
  parser.add_argument("--title", default="")
  args = parser.parse_args()

  rows = report.read_metrics(
    pathlib.Path(args.workdir) / "logs" / "metrics.jsonl"
  )
  # One row per RL step (a resumed run's rewrite wins, as in the report).
  rl = [r for r in report.rl_rows(rows) if "loss" in r]
  first = report.sft_eval_row(rows)
  evals = []
  if first and "eval/success_rate" in first:
    evals.append((0, first["eval/success_rate"]))
  evals += [
    (r["step"], r["eval/success_rate"]) for r in rl if "eval/success_rate" in r
  ]
  train = [(r["step"], r["success_rate"]) for r in rl]
  if not evals or not train:
    raise SystemExit(f"{args.workdir}: no RL or eval rows in metrics.jsonl")
  # RL wall time: from the start of the first RL step (its rollout and
  # update seconds before its row was written) to the last RL row.
  start = rl[0]["time"] - rl[0]["seconds"] - rl[0]["train_seconds"]
  minutes = (rl[-1]["time"] - start) / 60

  fig, ax = plt.subplots(figsize=(6, 3.5))
  (ts, tv), (es, ev) = zip(*train, strict=True), zip(*evals, strict=True)
  ax.plot(ts, tv, color="0.7", lw=1, label="training rollouts")
  ax.plot(es, ev, "o-", color="C0", label="held-out, greedy")
  ax.set_xlabel("RL step")
  ax.set_ylabel("success rate")
  ax.set_title(f"{args.title} (RL phase {minutes:.1f} min)".strip())
  ax.legend()
  fig.tight_layout()
  fig.savefig(args.out, dpi=100)
  for step, value in evals:
    print(f"eval step {step:4d}: success {value:.3f}")
  print(f"RL phase wall time: {minutes:.1f} min; wrote {args.out}")


if __name__ == "__main__":
  main()
