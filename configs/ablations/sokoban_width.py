"""Sokoban: why does GiGPO gain from a wider step?

  python scripts/sweep.py --config=configs/ablations/sokoban_width.py \
      --root=experiments/sokoban_width/runs --workers=2

Question: in experiments/sokoban_dynamic, GiGPO playing 3x the tasks a
step and updating on all of them (`gigpo_wide`: 24 tasks x 8 episodes, in
minibatches 3x as large) beat plain GiGPO by 9 points of late held-out
success on 6 seeds, while choosing 8 of 24 played groups (by outcome, by
return or at random) gained little or nothing. A wider step has more
tasks and more rows per update. This sweep separates them and asks for a
dose response:

  gigpo       `configs/sokoban.py:gigpo` (the baseline): 8 tasks x 8
  gigpo_2x    16 tasks x 8, minibatches 2x as large
  gigpo_wide  24 tasks x 8, minibatches 3x (as in sokoban_dynamic)
  gigpo_deep  8 tasks x 24 episodes, minibatches 3x: the rows and
              rollouts of gigpo_wide on the tasks of gigpo (GiGPO's
              anchor-state groups and its episode groups 3x as large)
  gigpo_one_update  gigpo's 64 episodes in one minibatch: one optimizer
              step a step instead of two, on as many rows as gigpo_2x's
  gigpo_spread  16 tasks x 4 episodes: gigpo's rollouts and updates,
              spread over twice the tasks in groups half as large

The first four take as many optimizer steps a step (2) at the same
learning rate, so the wider arms average more rows into each update. If
deep gains as much as wide, rows (or rollouts) are what matters; if it
gains less, the number of tasks a step is. gigpo_one_update has 2x's rows
per update without its extra episodes: if it gains as much, the size of
an update is what helps, not the data a step. gigpo_spread asks the
budget question: at gigpo's cost, more tasks or larger groups?

The grid is sokoban_dynamic's (shared SFT stages, task order, rollout
keys, 30 RL steps, 128 held-out levels): its gigpo and gigpo_wide runs
are these arms' runs, and its SFT stages these (`--stages_from`). `arg`:
as `sokoban_reward_input` ('', 'smoke' or 'seeds=N').

Measured (6 seeds): experiments/sokoban_width/.
"""

import ml_collections

from configs import sokoban
from configs.ablations import credit_assignment, sokoban_dynamic

ARMS = (
  "gigpo",
  "gigpo_2x",
  "gigpo_wide",
  "gigpo_deep",
  "gigpo_one_update",
  "gigpo_spread",
)
# Besides every arm against gigpo: the dose steps, deep against wide
# (equal rows and rollouts, a third of the tasks), and one update of 64
# rows against 2x's two; spread against 2x (its tasks, half the episodes).
PAIRS = (
  "gigpo_2x:gigpo_wide",
  "gigpo_wide:gigpo_deep",
  "gigpo_2x:gigpo_deep",
  "gigpo_one_update:gigpo_2x",
  "gigpo_spread:gigpo_2x",
)


def arms(c: ml_collections.ConfigDict) -> dict:
  """The wider arms, scaled from `c`'s rl and rollout sections (the full
  or the smoke config's)."""

  def scaled(tasks: int, episodes: int) -> dict:
    out = {"rl": {"minibatch_size": tasks * episodes * c.rl.minibatch_size}}
    if tasks != 1:
      out["rl"]["tasks_per_step"] = tasks * c.rl.tasks_per_step
    if episodes != 1:
      out["rollout"] = {"group_size": episodes * c.rollout.group_size}
    return {"variant": "gigpo", "overrides": out}

  wide = sokoban_dynamic.WIDE
  return {
    "gigpo_2x": scaled(2, 1),
    "gigpo_wide": scaled(wide, 1),
    "gigpo_deep": scaled(1, wide),
    "gigpo_spread": {
      "variant": "gigpo",
      "overrides": {
        "rl": {"tasks_per_step": 2 * c.rl.tasks_per_step},
        # (groups of 2 at least: the smoke config's are 2 already)
        "rollout": {"group_size": max(c.rollout.group_size // 2, 2)},
      },
    },
    "gigpo_one_update": {
      "variant": "gigpo",
      "overrides": {
        "rl": {"minibatch_size": c.rl.tasks_per_step * c.rollout.group_size}
      },
    },
  }


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  seeds, smoke = credit_assignment.parse_arg(arg)
  c = sokoban.get_config("gigpo,smoke" if smoke else "gigpo")
  c.sweep = credit_assignment.one_env_sweep(
    "sokoban_width", "sokoban", ARMS, seeds, smoke
  )
  c.sweep.baseline = "gigpo"
  c.sweep.pairs = PAIRS
  c.sweep.arms = arms(c)
  return c
