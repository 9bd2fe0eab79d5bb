"""Builds a sweep's report: README.md, results.json and plots.

  python scripts/report.py --root=runs/ca --out=experiments/credit_assignment

Reads `<root>/sweep.json` (written by scripts/sweep.py) and every finished
run's summary.json, config.json and logs/metrics.jsonl; unfinished runs are
listed, not guessed. `--baseline=EST` pairs every estimator against EST
instead of the sweep's baseline; `--pairs=A:B,C:D` pairs arm B against
arm A (and D against C) besides the sweep's own `pairs`. `--notes=FILE`
appends a hand-written Markdown section (e.g. how to scale the sweep) to
the generated README.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags  # noqa: E402

from agentic_rl import report  # noqa: E402

_ROOT = flags.DEFINE_string("root", None, "Sweep root (holds sweep.json).")
_OUT = flags.DEFINE_string("out", None, "Output folder for the report.")
_THRESHOLD = flags.DEFINE_float(
  "threshold", 0.5, "Success rate for the steps-to-threshold column."
)
_NOTES = flags.DEFINE_string(
  "notes", None, "Markdown file appended to the README."
)
_BASELINE = flags.DEFINE_string(
  "baseline",
  None,
  "Estimator to pair the others against (default: the sweep's baseline).",
)
_PAIRS = flags.DEFINE_list(
  "pairs", [], "A:B entries: arm B paired against arm A, same seeds."
)
flags.mark_flags_as_required(["root", "out"])


def main(argv: list[str]) -> None:
  del argv
  notes = pathlib.Path(_NOTES.value).read_text() if _NOTES.value else ""
  summary = report.write_report(
    _ROOT.value,
    _OUT.value,
    threshold=_THRESHOLD.value,
    notes=notes,
    baseline=_BASELINE.value,
    pairs=_PAIRS.value,
  )
  for line in report.findings(summary):
    print(line)
  print(f"wrote {_OUT.value}/README.md and results.json")


if __name__ == "__main__":
  app.run(main)
