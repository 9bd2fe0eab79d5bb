"""Did a longer run repeat a shorter one? Pairs of arms, seed by seed.

  python scripts/same_prefix.py experiments/sokoban_budget/runs \
      --pairs=gigpo:gigpo_long,grpo:grpo_long [--env=sokoban] \
      [--json experiments/sokoban_budget/same_prefix.json]

For each `A:B` and each seed both arms finished, run B's log is compared
with run A's over the RL steps both logged (`report.prefix_match`: every
value but wall-clock readings exactly, and every per-task verdict of the
evaluations both kept), and the table says whether they are one run
there, where they first part if not, and on which machines each ran.
Use it when one arm extends another (more RL steps, the same config and
seed otherwise): if the prefix is identical, the longer arm's early
evaluations are the shorter arm's, even on another CPU, and the two arms'
pairing carries no cross-machine noise up to there. Exits 1 if any pair
parts.
"""

import argparse
import json
import pathlib
import sys

# The repository root, for `agentic_rl` run from a checkout.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from agentic_rl import report  # noqa: E402


def same_prefix(
  root: pathlib.Path, env: str, pairs: list[tuple[str, str]]
) -> list[dict]:
  """One row per (pair, seed) with both runs finished (summary.json)."""
  rows = []
  for a, b in pairs:
    seeds = sorted(
      int(p.parent.name.removeprefix("seed"))
      for p in (root / env / a).glob("seed*/summary.json")
      if (root / env / b / p.parent.name / "summary.json").exists()
    )
    if not seeds:
      raise report.ReportError(
        f"{root / env}: no seed finished both {a} and {b}"
      )
    for seed in seeds:
      match = report.prefix_match(
        root / env / a / f"seed{seed}", root / env / b / f"seed{seed}"
      )
      rows.append({"a": a, "b": b, "seed": seed, **match})
  return rows


def table(rows: list[dict]) -> str:
  lines = [
    "| A:B | seed | steps | values | verdicts | same? | machines |",
    "|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    d = r["first_difference"]
    same = (
      "yes"
      if d is None
      else f"no: step {d['step']} {d['key']} {d['a']!r} / {d['b']!r}"
    )
    m = r["machines"]
    where = m["pair"] + (", probes agree" if m.get("probes_agree") else "")
    lines.append(
      f"| {r['a']}:{r['b']} | {r['seed']} | 0-{r['steps']} | {r['values']} "
      f"| {r['verdicts']} | {same} | {where} |"
    )
  labels = sorted({m for r in rows for k in "ab" for m in r["machines"][k]})
  return "\n".join(lines + ["", "machines:", *(f"  {m}" for m in labels)])


def main() -> int:
  parser = argparse.ArgumentParser()
  parser.add_argument("root", type=pathlib.Path)
  parser.add_argument("--pairs", required=True, help="A:B,... (arm names)")
  parser.add_argument("--env", default=None, help="default: the only env")
  parser.add_argument("--json", type=pathlib.Path)
  args = parser.parse_args()
  manifest = report.read_manifest(args.root)
  env = args.env or next(iter(manifest["envs"]))
  pairs = []
  for entry in args.pairs.split(","):
    a, b = report.arm_pair(entry)
    if a == b:
      parser.error(f"--pairs entry {entry!r}: expected A:B with A != B")
    pairs.append((a, b))
  rows = same_prefix(args.root, env, pairs)
  print(table(rows))
  parted = sum(r["first_difference"] is not None for r in rows)
  same = len(rows) - parted
  print(f"\n{same} of {len(rows)} pairs identical over their shared steps")
  if args.json:
    args.json.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {args.json}")
  return 1 if parted else 0


if __name__ == "__main__":
  sys.exit(main())
