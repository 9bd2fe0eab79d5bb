"""Sokoban: does DAPO's dynamic sampling help a group-relative estimator?

  python scripts/sweep.py --config=configs/ablations/sokoban_dynamic.py \
      --root=experiments/sokoban_dynamic/runs --workers=2

Question: most of a Sokoban step's groups fail on every episode (the SFT
stage solves a few percent of levels), so GRPO gives them zero advantages
and an update learns from the few groups whose outcomes differ. Dynamic
sampling (`configs/sokoban.py:...,dynamic`, `loop.roll_out_step`) sets
such groups aside and plays up to 3 rounds of 8 tasks a step to fill the
update with 8 groups that differ, at up to 3x the rollouts. Does held-out
success move differently, for GRPO (outcome only) and for GiGPO (whose
per-turn credit gets a signal from the shaped return even when outcomes
are equal)? And is it the choice of groups that helps, or only the
extra rollouts? The wide arms play 3x the tasks a step without choosing
(at least the episodes a dynamic arm plays) and update on all of them in
as many optimizer steps (minibatches 3x as large); the random arms play
as widely and train on as many rows as a dynamic arm, choosing at
random. Arms:

  gigpo           `configs/sokoban.py:gigpo` (the baseline)
  gigpo_dynamic   `configs/sokoban.py:gigpo,dynamic`
  gigpo_wide      gigpo, rl.tasks_per_step and rl.minibatch_size x3
  grpo            `configs/sokoban.py:grpo`
  grpo_dynamic    `configs/sokoban.py:grpo,dynamic`
  grpo_wide       grpo, rl.tasks_per_step and rl.minibatch_size x3
  gigpo_random    gigpo_dynamic, dynamic_sampling.choose="random": all 3
                  rounds played, the update's 8 groups drawn at random
  grpo_random     the same for grpo_dynamic
  gigpo_return    gigpo_dynamic, dynamic_sampling.score="return": a group
                  is set aside only when its shaped returns are all
                  alike, not its outcomes (GiGPO's turn credit learns
                  from returns that differ when outcomes do not)

Each dynamic arm differs from its plain one in the `dynamic` switch
only, each wide arm in the two `rl` fields only (compare any two with
`scripts/compare_conditions.py`); the report pairs every arm with gigpo
and compares the `PAIRS` below arm against arm.
The grid is the credit-assignment sweep's Sokoban arm (size, shared SFT
stages, task order, rollout keys: 30 RL steps of 8 tasks x 8 rollouts,
final success on 128 held-out levels). `arg`: as
`sokoban_reward_input` ('', 'smoke' or 'seeds=N').

Measured (6 seeds): experiments/sokoban_dynamic/; on code repair:
experiments/code_repair_sft/ (tenth part).
"""

import ml_collections

from configs import sokoban
from configs.ablations import credit_assignment

ARM_SUFFIXES = ("", "_dynamic", "_wide", "_random")
EXTRA_ARMS = ("gigpo_return",)  # GiGPO only: GRPO's advantages are outcomes
WIDE = 3  # a dynamic arm plays at most 3 rounds of tasks a step
# What the report pairs besides every arm against gigpo: each treatment
# against its controls within an estimator, then GiGPO against GRPO.
PAIRS = (
  "grpo:grpo_dynamic",
  "grpo:grpo_wide",
  "grpo:grpo_random",
  "grpo_wide:grpo_dynamic",
  "grpo_random:grpo_dynamic",
  "gigpo_wide:gigpo_dynamic",
  "gigpo_random:gigpo_dynamic",
  "gigpo_dynamic:gigpo_return",
  "grpo_dynamic:gigpo_dynamic",
  "grpo_wide:gigpo_wide",
)


def arms(rl: ml_collections.ConfigDict) -> dict:
  """The dynamic and wide arms, the wide ones scaled from `rl` (the
  plain config's section: the full or the smoke one)."""
  wide = {
    "rl": {
      "tasks_per_step": WIDE * rl.tasks_per_step,
      "minibatch_size": WIDE * rl.minibatch_size,
    }
  }
  random = {"dynamic_sampling": {"choose": "random"}}
  return {
    "gigpo_dynamic": {"variant": "gigpo,dynamic"},
    "grpo_dynamic": {"variant": "grpo,dynamic"},
    "gigpo_wide": {"variant": "gigpo", "overrides": wide},
    "grpo_wide": {"variant": "grpo", "overrides": wide},
    "gigpo_random": {"variant": "gigpo,dynamic", "overrides": random},
    "grpo_random": {"variant": "grpo,dynamic", "overrides": random},
    "gigpo_return": {
      "variant": "gigpo,dynamic",
      "overrides": {"dynamic_sampling": {"score": "return"}},
    },
  }


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  seeds, smoke = credit_assignment.parse_arg(arg)
  c = sokoban.get_config("gigpo,smoke" if smoke else "gigpo")
  c.sweep = credit_assignment.one_env_sweep(
    "sokoban_dynamic",
    "sokoban",
    tuple(f"{e}{arm}" for e in ("gigpo", "grpo") for arm in ARM_SUFFIXES)
    + EXTRA_ARMS,
    seeds,
    smoke,
  )
  c.sweep.baseline = "gigpo"
  c.sweep.pairs = PAIRS
  c.sweep.arms = arms(c.rl)
  return c
