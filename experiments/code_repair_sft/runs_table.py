"""Per-step table of this folder's RL runs (see its README).

  python experiments/code_repair_sft/runs_table.py \
      runs/code_repair/rl10_warm0 runs/code_repair/rl10_warm10 \
      [--json experiments/code_repair_sft/warmup.json]

Reads each run's `logs/metrics.jsonl`; prints, per RL step, the update's
learning rate, KL to the SFT policy, gradient norm and training-rollout
success, then each evaluation's success and per-tool failure rates. Runs
that log them also get, per step, the episodes played, the fraction of
groups with mixed success (and per difficulty), and dynamic sampling's
rounds; and, per evaluation, the success per difficulty.
"""

import argparse
import json
import pathlib

STEP_KEYS = ("learning_rate", "kl", "grad_norm", "success_rate", "return_mean")
# Logged since 2026-12-06: groups with a signal, dynamic sampling.
STEP_PREFIXES = ("groups/mixed_success", "dynamic/")
EVAL_KEYS = (
  "eval/success_rate",
  "eval/failure_rate/malformed_call",
  "eval/failure_rate/tool_error",
  "eval/failure_rate/context_overflow",
)


def load(run: pathlib.Path) -> list[dict]:
  rows = [json.loads(x) for x in (run / "logs/metrics.jsonl").open()]
  return sorted(rows, key=lambda r: r["step"])


def main():
  p = argparse.ArgumentParser()
  p.add_argument("runs", nargs="+")
  p.add_argument("--json", default="")
  args = p.parse_args()
  out = {}
  for name in args.runs:
    rows = load(pathlib.Path(name))
    steps = [
      {
        "step": r["step"],
        **{k: r[k] for k in STEP_KEYS if k in r},
        **{
          k: v
          for k, v in r.items()
          if k == "episodes" or k.startswith(STEP_PREFIXES)
        },
      }
      for r in rows
      if "kl" in r
    ]
    evals = [
      {
        "step": r["step"],
        **{k: v for k, v in r.items() if k in EVAL_KEYS},
        **{
          k: v
          for k, v in r.items()
          if k.startswith(
            ("eval/tool_failure_rate/", "eval/tool/", "eval/success_rate/")
          )
        },
      }
      for r in rows
      if "eval/success_rate" in r
    ]
    out[name] = {"steps": steps, "evals": evals}
    print(f"\n{name}")
    print("step | lr | kl | grad_norm | train success | train return")
    for s in steps:
      print(
        f"{s['step']:4d} | {s['learning_rate']:.2e} | {s['kl']:.4f} | "
        f"{s['grad_norm']:.2f} | {s['success_rate']:.3f} | "
        f"{s['return_mean']:.3f}"
        + "".join(
          f" | {k} {v:.3g}"
          for k, v in s.items()
          if k == "episodes" or k.startswith(STEP_PREFIXES)
        )
      )
    for e in evals:
      cells = ", ".join(
        f"{k.removeprefix('eval/')} {v:.3f}"
        for k, v in e.items()
        if k != "step" and not k.startswith("eval/tool/")
      )
      print(f"eval @ {e['step']}: {cells}")
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
  main()
