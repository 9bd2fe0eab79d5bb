"""How often does the curriculum's promotion rule fire by chance?

  python scripts/curriculum_sim.py \
      --calibrate='experiments/*/runs/*/gigpo_curriculum*/seed*' \
      --out=experiments/curriculum_promotion

`SuccessRateCurriculum` unlocks the next difficulty once the frontier's
success over its last `--window` episodes reaches the threshold and stays
there for `--hold` consecutive episodes. This simulates the frontier's
outcome stream of an RL run whose true success rate p does not change:
each step draws `--tasks` tasks, each with its own success probability
from Beta(kappa p, kappa (1 - p)) (tasks differ: some levels the policy
solves, some it does not), then `--rollouts` outcomes per task in
task-major order, as the rollout driver returns them. Each stream is
scored with the rule (`curriculum.first_promotion`); every threshold and
hold scores the same streams (common random numbers). For every threshold,
p, kappa and hold it reports the fraction of `--sims` runs that promote
within `--steps` steps and the promotion step's quartiles.

`--calibrate` (a glob of run directories with a curriculum) estimates
kappa from logged runs: each RL step before the first promotion logs the
frontier batch's success rate, and its spread across steps beyond the
binomial one gives kappa by

  Var(batch rate) = [p(1-p) + (m-1) p(1-p) / (kappa+1)] / (tasks m),

with m rollouts per task. The policy also changes between steps, which adds
to the spread, so the calibrated kappa errs on the noisy side. Writes
results.json and results.md into --out.
"""

import argparse
import glob
import json
import math
import pathlib
import platform

import numpy as np

from agentic_rl.data.curriculum import first_promotion


def frontier_streams(
  rng: np.random.Generator,
  p: float,
  kappa: float,
  sims: int,
  steps: int,
  tasks: int,
  rollouts: int,
) -> np.ndarray:
  """[sims, steps * tasks * rollouts] 0/1 outcomes, task-major per step."""
  shape = (sims, steps * tasks)
  if math.isinf(kappa):
    p_task = np.full(shape, p)
  else:
    p_task = rng.beta(kappa * p, kappa * (1.0 - p), size=shape)
  outcome = rng.random((*shape, rollouts)) < p_task[..., None]
  return outcome.reshape(sims, -1).astype(np.int64)


def kappa_from_rates(rates: list[float], tasks: int, rollouts: int) -> float:
  """Beta concentration whose task spread explains the batch rates' variance
  (inf when it is no more than binomial)."""
  p, var = float(np.mean(rates)), float(np.var(rates, ddof=1))
  excess = tasks * rollouts * var - p * (1.0 - p)
  if excess <= 0:
    return math.inf
  return (rollouts - 1) * p * (1.0 - p) / excess - 1.0


def calibrate(pattern: str, min_steps: int) -> list[dict]:
  """One row per run with `min_steps` or more RL steps before its first
  promotion: those batches' success mean, std and kappa (from the run's own
  tasks per step and rollouts per task). Only the lowest difficulty is
  unlocked then, so every episode of those batches is on it.

  Two arms that differ only after a promotion log the same batches until
  then; a run whose rates repeat an earlier run's exactly gets `same_as`
  (that run) and is one measurement, not two (`main` leaves it out of the
  median)."""
  rows, seen = [], {}
  for run in sorted(glob.glob(pattern)):
    config_path = pathlib.Path(run, "config.json")
    metrics = pathlib.Path(run, "logs", "metrics.jsonl")
    if not (config_path.exists() and metrics.exists()):
      raise FileNotFoundError(f"{run}: no config.json or logs/metrics.jsonl")
    config = json.loads(config_path.read_text())
    cur = config.get("curriculum") or {}
    if not cur:
      raise ValueError(f"{run}: the run has no curriculum")
    if cur.get("initially_unlocked", 1) != 1:
      raise ValueError(f"{run}: starts with several difficulties unlocked")
    first = min(config["tasks"]["difficulties"])
    key = f"success_rate/d{first}"
    lines = [json.loads(line) for line in metrics.read_text().splitlines()]
    # a row's frontier is after its update and only rises: these batches were
    # all sampled with the first difficulty alone unlocked
    rates = [
      r[key]
      for r in lines
      if r.get("curriculum/frontier") == first and key in r
    ]
    if len(rates) < min_steps:
      continue  # promoted too early to estimate a spread
    tasks, rollouts = (
      config["rl"]["tasks_per_step"],
      config["rollout"]["group_size"],
    )
    row = {
      "run": run,
      "steps": len(rates),
      "mean": float(np.mean(rates)),
      "std": float(np.std(rates, ddof=1)),
      "kappa": kappa_from_rates(rates, tasks, rollouts),
    }
    if (first_run := seen.setdefault(tuple(rates), run)) != run:
      row["same_as"] = first_run
    rows.append(row)
  if not rows:
    raise ValueError(
      f"--calibrate={pattern!r}: no run with {min_steps}+ steps before "
      "its first promotion"
    )
  return rows


def simulate(args, kappas: list[float]) -> list[dict]:
  """One row per (threshold, kappa, p, hold). Common random numbers: every
  threshold and hold scores the same streams of a (kappa, p) cell, so the
  differences between thresholds or holds are the rule's, not the draw's."""
  rng = np.random.default_rng(args.seed)
  batch = args.tasks * args.rollouts
  out = []
  for kappa in kappas:
    for p in args.rates:
      streams = frontier_streams(
        rng, p, kappa, args.sims, args.steps, args.tasks, args.rollouts
      )
      for threshold in args.thresholds:
        for hold in args.holds:
          episode = first_promotion(
            streams, threshold, args.min_episodes, args.window, hold
          )
          promoted = episode > 0
          step = -(-episode[promoted] // batch)  # the RL step it happened in
          q = [None] * 3
          if promoted.any():
            q = [float(x) for x in np.percentile(step, [25, 50, 75])]
          out.append(
            {
              "threshold": threshold,
              "kappa": kappa,
              "p": p,
              "hold": hold,
              "promoted": float(promoted.mean()),
              "step_q25": q[0],
              "step_median": q[1],
              "step_q75": q[2],
            }
          )
  order = {t: i for i, t in enumerate(args.thresholds)}
  return sorted(out, key=lambda r: order[r["threshold"]])  # stable


def table(rows: list[dict], args) -> str:
  by_cell = {(r["threshold"], r["kappa"], r["p"], r["hold"]): r for r in rows}
  lines = []
  for threshold in args.thresholds:
    for kappa in sorted({r["kappa"] for r in rows}):
      lines += [
        f"\nthreshold {threshold}, kappa {kappa:.2f}: promoted within "
        f"{args.steps} steps, % (median step)\n",
        "| true p | " + " | ".join(f"hold {h}" for h in args.holds) + " |",
        "|---|" + "---|" * len(args.holds),
      ]
      for p in args.rates:
        cells = []
        for hold in args.holds:
          r = by_cell[threshold, kappa, p, hold]
          med = r["step_median"]
          cells.append(
            f"{100 * r['promoted']:.1f}"
            + (f" ({med:.0f})" if med is not None else "")
          )
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--thresholds", type=float, nargs="+", default=[0.2, 0.35])
  ap.add_argument(
    "--rates",
    type=float,
    nargs="+",
    default=[0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5],
  )
  ap.add_argument("--holds", type=int, nargs="+", default=[1, 64, 128, 256])
  ap.add_argument(
    "--kappas",
    type=float,
    nargs="+",
    default=[math.inf],
    help="task spreads to simulate (inf: every task has rate p)",
  )
  ap.add_argument("--calibrate", default="", help="glob of run dirs")
  ap.add_argument(
    "--min_steps",
    type=int,
    default=10,
    help="calibrate from runs with this many steps before promoting",
  )
  ap.add_argument("--window", type=int, default=128)
  ap.add_argument("--min_episodes", type=int, default=64)
  ap.add_argument("--steps", type=int, default=30)
  ap.add_argument("--tasks", type=int, default=8)
  ap.add_argument("--rollouts", type=int, default=8)
  ap.add_argument("--sims", type=int, default=2000)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--out", default="")
  args = ap.parse_args(argv)
  kappas = list(args.kappas)
  calibration = []
  if args.calibrate:
    calibration = calibrate(args.calibrate, args.min_steps)
    for c in calibration:
      print(
        f"{c['run']}: {c['steps']} frontier steps, batch success "
        f"{c['mean']:.3f} ± {c['std']:.3f}, kappa {c['kappa']:.2f}"
        + (f" (the batches of {c['same_as']})" if "same_as" in c else "")
      )
    finite = [
      c["kappa"]
      for c in calibration
      if math.isfinite(c["kappa"]) and "same_as" not in c
    ]
    if finite:
      kappas.append(float(np.median(finite)))
  rows = simulate(args, kappas)
  md = table(rows, args)
  print(md)
  if args.out:
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    settings = {
      k: v for k, v in vars(args).items() if k not in ("out", "calibrate")
    }
    settings["kappas"] = kappas
    (out / "results.json").write_text(
      json.dumps(
        {
          "settings": settings,
          "calibrate": args.calibrate,
          "calibration": calibration,
          "machine": platform.platform(),
          "rows": rows,
        },
        indent=2,
        default=str,
      )
    )
    (out / "results.md").write_text(md.lstrip() + "\n")
    print(f"wrote {out / 'results.json'} and {out / 'results.md'}")


if __name__ == "__main__":
  main()
