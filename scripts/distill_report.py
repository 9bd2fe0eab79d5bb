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
"""

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags  # noqa: E402

from agentic_rl import report  # noqa: E402

_ROOT = flags.DEFINE_string("root", None, "Folder of <source>_seed<N> runs.")
_BASELINE = flags.DEFINE_string("baseline", "expert", "Source to pair with.")
_OUT = flags.DEFINE_string("out", None, "JSON file for the numbers.")
_PLOT = flags.DEFINE_string("plot", None, "PNG file for the bar chart.")
flags.mark_flag_as_required("root")


def main(argv: list[str]) -> None:
  del argv
  rows = report.load_distill_runs(_ROOT.value)
  summary = report.distill_summary(rows, _BASELINE.value)
  table = report.distill_table(summary, _BASELINE.value)
  print(table)
  if _PLOT.value:
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
