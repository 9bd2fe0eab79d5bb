"""A distillation study's table: held-out success by cold-start source.

  python scripts/distill_report.py --root=runs/distill \
      --out=experiments/distill/report.json \
      --plot=experiments/distill/success.png

Reads `<root>/<source>_seed<seed>/summary.json` (the runs of
`experiments/distill/run.sh`), prints a Markdown table (mean and 95%
t-interval over seeds, seed-paired difference to `--baseline`, the
teacher's pass@K, kept trajectories and held-out success), writes the
numbers as JSON and, with --plot, a bar chart (a dot per seed, the
teacher's held-out success as a line).

  python scripts/distill_report.py --stage=online --baseline=rl \
      --root=runs/onpolicy_distill \
      --out=experiments/onpolicy_distill/report.json \
      --plot=experiments/onpolicy_distill/success.png

compares online stages after one cold start (the runs of
`experiments/onpolicy_distill/run.sh`): held-out success after the stage,
paired by seed, the teacher's last agreement and divergence, and held-out
success against the online step (mean over seeds per arm).
"""

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags  # noqa: E402

from agentic_rl import report  # noqa: E402

_ROOT = flags.DEFINE_string("root", None, "Folder of <source>_seed<N> runs.")
_STAGE = flags.DEFINE_enum(
  "stage", "cold_start", ["cold_start", "online"], "Which result to compare."
)
_BASELINE = flags.DEFINE_string("baseline", "expert", "Source to pair with.")
_OUT = flags.DEFINE_string("out", None, "JSON file for the numbers.")
_PLOT = flags.DEFINE_string("plot", None, "PNG file for the bar chart.")
flags.mark_flag_as_required("root")


def main(argv: list[str]) -> None:
  del argv
  rows = report.load_distill_runs(_ROOT.value)
  online = _STAGE.value == "online"
  metric = "success_after_rl" if online else "success"
  summary = report.distill_summary(rows, _BASELINE.value, metric)
  render = report.online_table if online else report.distill_table
  table = render(summary, _BASELINE.value)
  print(table)
  if _PLOT.value and online:
    report.plot_online(_ROOT.value, rows, summary, _PLOT.value)
  elif _PLOT.value:
    report.plot_distill(rows, summary, _PLOT.value)
  if _OUT.value:
    out = pathlib.Path(_OUT.value)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
      "root": _ROOT.value,
      "runs": rows,
      "summary": summary,
      "table": table,
      "machine": report.machine(),
    }
    out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
  app.run(main)
