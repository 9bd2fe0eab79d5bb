"""Greedy held-out episodes of a code-repair checkpoint, split by whether
the policy's first `search_code` call found anything.

  python experiments/code_repair_sft/first_search.py runs/cr2/sft_edit_file \
      [--arg=gigpo,tests_first] [--edit_tool=replace_lines] [--tasks=64]

Builds the run from `configs/code_repair.py:<arg>` (with that edit tool)
in a scratch workdir, restores the checkpoint, plays the first
--tasks held-out tasks greedily (as the loop's evaluation does) and prints,
for episodes whose first search hit a line and for those it did not (or
that never searched), the episodes, the solved ones and their malformed
calls.
"""

import argparse
import collections
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from absl import logging  # noqa: E402

from agentic_rl import sweeps  # noqa: E402
from agentic_rl.rollout.evaluation import play  # noqa: E402
from agentic_rl.train import loop  # noqa: E402
from agentic_rl.types import FailureCode  # noqa: E402


def first_search(trajectory) -> str:
  for turn in trajectory.turns:
    if turn.action.name == "search_code" and turn.failure is None:
      return "missed" if "No matches" in turn.observation else "hit"
  return "none"


def main():
  p = argparse.ArgumentParser()
  p.add_argument("run")
  p.add_argument("--edit_tool", default="edit_file")
  p.add_argument("--arg", default="gigpo", help="configs/code_repair.py arg")
  p.add_argument("--tasks", type=int, default=64)
  p.add_argument("--step", type=int, default=0)
  args = p.parse_args()
  logging.set_verbosity(logging.WARNING)
  config = sweeps.load_config(f"configs/code_repair.py:{args.arg}")
  config.env.options.edit_tool = args.edit_tool
  with loop.scratch_run(config) as run:
    loop.restore_step(run, pathlib.Path(args.run) / "checkpoints", args.step)
    trajectories, _ = play(run.rollout, run.eval_tasks[: args.tasks])
    counts = collections.Counter()
    for t in trajectories:
      kind = first_search(t)
      counts[kind, "episodes"] += 1
      counts[kind, "solved"] += int(run.stack.succeeded(t))
      counts[kind, "malformed calls"] += sum(
        u.failure == FailureCode.MALFORMED_CALL for u in t.turns
      )
  print(f"{args.run} (step {args.step}), {len(trajectories)} held-out tasks")
  print("first search | episodes | solved | malformed calls")
  for kind in ("hit", "missed", "none"):
    if counts[kind, "episodes"]:
      print(
        f"{kind:12s} | {counts[kind, 'episodes']:8d} | "
        f"{counts[kind, 'solved']:6d} | {counts[kind, 'malformed calls']}"
      )


if __name__ == "__main__":
  main()
