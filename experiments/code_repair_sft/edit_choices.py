"""Which line a code-repair policy's edit targets: the bug it read, or a
line remembered from its demonstrations?

  python experiments/code_repair_sft/edit_choices.py \
      --source=runs/cr3/sft_read_all_s2 [--step=0] [--tasks=64] \
      [--out=experiments/code_repair_sft/edit_choices_s2.json]

Rebuilds the source run from its own config.json (or from --config, with
the overrides it was trained with: the demo tasks are rebuilt from it) in
a scratch workdir, restores the checkpoint, plays the first --tasks
held-out tasks greedily (as the loop's evaluation does) and sorts each
episode by the `old` text of its first well-formed `edit_file` call:

  the bug          this task's buggy line;
  a demo's bug     the buggy line of an SFT demonstration task, not this
                   task's (recalled, not read);
  another line     some other line of this task's modules;
  other text       none of these;
  no edit          no well-formed `edit_file` call in the episode.

Then it splits success by whether this task's buggy line is also the
buggy line of some demonstration task: a policy that recalls lines can
only solve the tasks whose line it was shown.
"""

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from agentic_rl.rollout.evaluation import play  # noqa: E402
from agentic_rl.train import loop  # noqa: E402
from agentic_rl.types import ActionKind  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
  "config", None, "Run config (default: the source run's config.json)."
)
_SOURCE = flags.DEFINE_string("source", None, "Run directory.")
_STEP = flags.DEFINE_integer("step", 0, "Checkpoint (RL step) to load.")
_TASKS = flags.DEFINE_integer("tasks", 64, "Held-out episodes.")
_OUT = flags.DEFINE_string("out", "", "JSON output path (optional).")
flags.mark_flags_as_required(["source"])

KINDS = ("the bug", "a demo's bug", "another line", "other text", "no edit")


def first_edit(trajectory) -> str | None:
  """The `old` text of the episode's first well-formed edit_file call."""
  for turn in trajectory.turns:
    action = turn.action
    if (
      action is not None
      and action.kind == ActionKind.TOOL_CALL
      and action.name == "edit_file"
      and isinstance(action.arguments.get("old"), str)
    ):
      return action.arguments["old"]
  return None


def edit_kind(old: str | None, task, demo_bugs: set[str]) -> str:
  if old is None:
    return "no edit"
  if old == task.payload["bug"]["buggy_line"]:
    return "the bug"
  if old in demo_bugs:
    return "a demo's bug"
  lines = {
    line
    for source in task.payload["files"].values()
    for line in source.splitlines()
  }
  return "another line" if old in lines else "other text"


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  config = _CONFIG.value or loop.run_config(_SOURCE.value)
  if config.env.options.get("edit_tool", "edit_file") != "edit_file":
    raise ValueError(
      "edit_choices reads edit_file calls; the config edits "
      f"with {config.env.options.edit_tool!r}"
    )
  with loop.scratch_run(config) as run:
    loop.restore_step(
      run, pathlib.Path(_SOURCE.value) / "checkpoints", _STEP.value
    )
    demos = loop.sft_demo_tasks(run.train_pool, config.sft)
    demo_bugs = {t.payload["bug"]["buggy_line"] for t in demos}
    tasks = list(run.eval_tasks)[: _TASKS.value]
    trajectories, _ = play(run.rollout, tasks)  # as loop.evaluate plays
    episodes = []
    for t in trajectories:
      bug, old = t.task.payload["bug"]["buggy_line"], first_edit(t)
      episodes.append(
        {
          "seed": t.task.seed,
          "bug": bug,
          "old": old,
          "edit": edit_kind(old, t.task, demo_bugs),
          "bug_in_demos": bug in demo_bugs,
          "solved": bool(run.stack.succeeded(t)),
        }
      )

  def tally(keep) -> dict[str, int]:
    kept = [e for e in episodes if keep(e)]
    return {"episodes": len(kept), "solved": sum(e["solved"] for e in kept)}

  by_kind = {k: tally(lambda e, k=k: e["edit"] == k) for k in KINDS}
  by_seen = {
    seen: tally(lambda e, seen=seen: e["bug_in_demos"] == seen)
    for seen in (True, False)
  }
  print(
    f"{_SOURCE.value} (step {_STEP.value}): {len(episodes)} held-out tasks, "
    f"{len(demos)} demo tasks with {len(demo_bugs)} distinct buggy lines"
  )
  print("first edit's old text | episodes | solved")
  for k in KINDS:
    print(f"{k:21s} | {by_kind[k]['episodes']:8d} | {by_kind[k]['solved']}")
  print("task's bug in the demos | episodes | solved")
  for seen in (True, False):
    b = by_seen[seen]
    print(f"{'yes' if seen else 'no':23s} | {b['episodes']:8d} | {b['solved']}")
  if _OUT.value:
    pathlib.Path(_OUT.value).write_text(
      json.dumps(
        {
          "source": _SOURCE.value,
          "step": _STEP.value,
          "demo_tasks": len(demos),
          "demo_bug_lines": len(demo_bugs),
          "first_edit": by_kind,
          "bug_in_demos": {str(k).lower(): v for k, v in by_seen.items()},
          "episodes": episodes,
        },
        indent=1,
      )
    )


if __name__ == "__main__":
  app.run(main)
