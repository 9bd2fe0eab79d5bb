"""SFT then RL on slippery FrozenLake (4x4 random maps), tiny preset, CPU.

  python -m agentic_rl.main --config=configs/frozenlake.py:gigpo \
      --workdir=runs/frozenlake_gigpo

`arg` is read as in `configs/sokoban.py`: one estimator variant (grpo,
dr_grpo, rloo, reinforce_pp, gigpo, gigpo_std, turn_discounted,
prm_weighted; default gigpo) and optionally `smoke` (a seconds-long run for
CI). Everything but the environment is Sokoban's config, so a difference
between the two environments is the environment's, not the recipe's.

Slippery ice moves the agent the intended way with probability 1/3, so
identical action sequences reach different cells: the credit-assignment
case where per-state baselines (GiGPO) and whole-episode baselines (GRPO)
should differ most. The slip draws come from the reset seed, which the
rollout takes from the task, so the G rollouts of a task share them.

Expected (2-core CPU, default size): a success rate well below 1 even for
the value-iteration expert (slippery 4x4 maps are not always solvable
within the turn budget); see experiments/credit_assignment/README.md.
"""

import ml_collections

from configs import sokoban

ESTIMATORS = sokoban.ESTIMATORS


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  c, smoke = sokoban.unit_success_config(arg)
  c.env = {
    "name": "frozenlake",
    "options": {"slippery": True, "instructions": False, "max_steps": 10},
  }
  # Reaching G is the only outcome; a valid move and a new cell are the
  # process evidence the PRM-weighted estimator reads.
  c.rewards.process.signals = ("valid_action", "novel_state")
  if smoke:
    c.env.options.max_steps = 3
  return c
