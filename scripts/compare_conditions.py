"""Two sweeps that differ in one setting, compared run for run.

  python scripts/compare_conditions.py \
      --a=experiments/credit_assignment/runs --label_a="with progress" \
      --b=experiments/search_qa_shaping/runs --label_b="without" \
      --env=search_qa --estimators=grpo,gigpo_std \
      --metrics=eval/success_rate,eval/failure_rate/malformed_call \
      --out=experiments/search_qa_shaping/paired.json

Two arms of one sweep: leave out --b and name the pairs `A_ARM:B_ARM`,

  python scripts/compare_conditions.py --a=experiments/sokoban_dynamic/runs \
      --label_a=plain --label_b=dynamic --env=sokoban \
      --estimators=grpo:grpo_dynamic,gigpo:gigpo_dynamic

For each estimator (or pair of arms) and metric: the value at each run's
last evaluation (a metric `late:M`: M's mean over the evaluations of the
second half of RL, the sweep reports' "late success"), by seed, under A
and under B, and the paired difference B - A (mean and 95% t-interval
over the seeds finished under both); for success, also the final
evaluations task by task, pooled over the seeds whose runs kept per-task
verdicts (tasks only A solved / only B solved, McNemar's exact p).
Prints a Markdown table and writes it, with the numbers, as JSON.
"""

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags  # noqa: E402

from agentic_rl import report  # noqa: E402

_A = flags.DEFINE_string("a", None, "Sweep root of condition A.")
_B = flags.DEFINE_string(
  "b", None, "Sweep root of condition B (default: --a, to pair its arms)."
)
_LABEL_A = flags.DEFINE_string("label_a", "A", "Name of condition A.")
_LABEL_B = flags.DEFINE_string("label_b", "B", "Name of condition B.")
_ENV = flags.DEFINE_string("env", None, "Environment label in both sweeps.")
_ESTIMATORS = flags.DEFINE_list("estimators", None, "Estimators to pair.")
_METRICS = flags.DEFINE_list(
  "metrics",
  ["eval/success_rate"],
  "Logged eval metrics to compare (late:M for M's late mean).",
)
_OUT = flags.DEFINE_string("out", None, "JSON file for the table's numbers.")
flags.mark_flags_as_required(["a", "env", "estimators"])


def main(argv: list[str]) -> None:
  del argv
  root_b = _B.value or _A.value
  rows = report.compare_conditions(
    _A.value, root_b, _ENV.value, _ESTIMATORS.value, _METRICS.value
  )
  table = report.comparison_table(rows, _LABEL_A.value, _LABEL_B.value)
  print(table)
  if _OUT.value:
    out = pathlib.Path(_OUT.value)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
      "a": _A.value,
      "b": root_b,
      "labels": [_LABEL_A.value, _LABEL_B.value],
      "env": _ENV.value,
      "rows": rows,
      "table": table,
    }
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
  app.run(main)
