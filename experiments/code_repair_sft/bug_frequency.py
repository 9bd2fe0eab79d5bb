"""Held-out success by how many demonstrations held the task's buggy line.

  python experiments/code_repair_sft/bug_frequency.py \
      experiments/code_repair_sft/edit_choices/read_all_sft_s{0,1,2}.json \
      [--arg=read_all] [--num_demos=512]

Reads `edit_choices.py` outputs (each episode's buggy line and whether it
was solved), rebuilds the SFT stage's demonstration tasks from
`configs/code_repair.py:<arg>` with --num_demos demonstrations (the
training pool grown to hold them), counts the demonstrations with each
buggy line, and prints the episodes and solves, pooled over the files,
for lines held by 0, 1-4, 5-19 and 20 or more demonstrations.
"""

import argparse
import collections
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from agentic_rl import sweeps  # noqa: E402
from agentic_rl.train import loop  # noqa: E402

BINS = ((0, 0), (1, 4), (5, 19), (20, None))


def label(lo: int, hi: int | None) -> str:
  return f"{lo}+" if hi is None else str(lo) if lo == hi else f"{lo}-{hi}"


def main():
  p = argparse.ArgumentParser()
  p.add_argument("files", nargs="+")
  p.add_argument("--arg", default="read_all", help="configs/code_repair.py arg")
  p.add_argument("--num_demos", type=int, default=512)
  args = p.parse_args()
  config = sweeps.load_config(f"configs/code_repair.py:{args.arg}")
  config.sft.num_demos = args.num_demos
  config.tasks.train_counts = (max(args.num_demos, *config.tasks.train_counts),)
  train = loop.task_pool(config).split("train")
  counts = collections.Counter(
    t.payload["bug"]["buggy_line"]
    for t in loop.sft_demo_tasks(train, config.sft)
  )
  tally = {b: [0, 0] for b in BINS}
  for name in args.files:
    for e in json.loads(pathlib.Path(name).read_text())["episodes"]:
      k = counts[e["bug"]]
      b = next(b for b in BINS if k >= b[0] and (b[1] is None or k <= b[1]))
      tally[b][0] += 1
      tally[b][1] += e["solved"]
  print(f"{args.num_demos} demonstrations, {len(args.files)} file(s)")
  print("demos with the task's line | episodes | solved")
  for b, (n, solved) in tally.items():
    print(f"{label(*b):26s} | {n:8d} | {solved}")


if __name__ == "__main__":
  main()
