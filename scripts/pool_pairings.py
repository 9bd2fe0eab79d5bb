"""Task-by-task comparisons of several seeds' evaluations, pooled.

  python scripts/pool_pairings.py \
      --before=eval256/stage_s1.json:0,eval256/stage_s2.json:0 \
      --after=eval256/rl10_s1.json:10,eval256/rl10_s2.json:10 \
      --out=experiments/code_repair_sft/pooled.json

Each item is FILE:STEP: an output of `scripts/evaluate_checkpoints.py` and
one of its steps, or a run's summary.json and an RL step it evaluated
(0 = after SFT). The i-th --before is paired with the i-th --after (say a
seed's SFT stage with the RL run started from it) on the tasks both
played: tasks lost, gained and McNemar's exact p per pair, then all pairs
pooled (`report.pooled_tasks`: the discordant (seed, task) pairs summed).
The pooled test asks whether these policies changed on these tasks; with
two or three seeds it resolves what an interval over seeds cannot.
"""

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from absl import app, flags  # noqa: E402

from agentic_rl import report  # noqa: E402

_BEFORE = flags.DEFINE_list("before", None, "FILE:STEP per seed, reference.")
_AFTER = flags.DEFINE_list("after", None, "FILE:STEP per seed, compared.")
_OUT = flags.DEFINE_string("out", None, "JSON file for the numbers.")
flags.mark_flags_as_required(["before", "after"])


def pool(before: list[str], after: list[str]) -> dict:
  """Per-pair and pooled `PairedTasks` dicts of aligned FILE:STEP lists."""
  if len(before) != len(after):
    raise report.ReportError(
      f"{len(before)} --before against {len(after)} --after: pair them one"
      " to one"
    )
  pairs = [
    report.paired_tasks(report.read_solved(a), report.read_solved(b))
    for a, b in zip(before, after, strict=True)
  ]
  return {
    "pairs": [
      {"before": a, "after": b, **p.to_dict()}
      for a, b, p in zip(before, after, pairs, strict=True)
    ],
    "pooled": report.pooled_tasks(pairs).to_dict(),
  }


def table(result: dict) -> str:
  lines = [
    "| before | after | tasks | rate before | rate after | lost | gained | p |",
    "|---|---|---|---|---|---|---|---|",
  ]
  rows = [
    *result["pairs"],
    {"before": "pooled", "after": "", **result["pooled"]},
  ]
  for r in rows:
    lines.append(
      f"| {r['before']} | {r['after']} | {r['n']} | {r['rate_a']:.3f} "
      f"| {r['rate_b']:.3f} | {r['only_a']} | {r['only_b']} "
      f"| {r['p_value']:.3g} |"
    )
  return "\n".join(lines)


def main(argv: list[str]) -> None:
  del argv
  result = pool(_BEFORE.value, _AFTER.value)
  print(table(result))
  if _OUT.value:
    out = pathlib.Path(_OUT.value)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
  app.run(main)
