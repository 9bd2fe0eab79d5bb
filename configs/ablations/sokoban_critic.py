"""Sokoban: does a learned critic (PPO) match the critic-free estimators?

  python scripts/sweep.py --config=configs/ablations/sokoban_critic.py:seeds=8 \
      --root=experiments/sokoban_critic/runs --workers=2

Question: every estimator of the credit-assignment sweep is critic-free
(group baselines, GiGPO's anchor states). PPO's answer to the same
problem is a value model: here GAE over turns (`ppo`: one value per
decision, gamma = lam = 0.95, the critic a copy of the post-SFT policy
with a zero value head, trained after each policy update). Does it beat
GRPO, and does it reach GiGPO, whose per-turn credit comes from states
that recur within a group rather than from a learned V?

The grid is `sokoban_reward_input`'s (the credit-assignment sweep's
Sokoban arm: size, SFT stages, task order, rollout keys), so its grpo and
gigpo runs pair seed for seed with ppo where the code is the same.
`arg`: as `sokoban_reward_input` ('', 'smoke' or 'seeds=N').
Measured: experiments/sokoban_critic/README.md.
"""

import ml_collections

from configs import sokoban
from configs.ablations import credit_assignment

ESTIMATORS = ("grpo", "gigpo", "ppo")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  seeds, smoke = credit_assignment.parse_arg(arg)
  c = sokoban.get_config("grpo,smoke" if smoke else "grpo")
  c.sweep = credit_assignment.one_env_sweep(
    "sokoban_critic", "sokoban", ESTIMATORS, seeds, smoke
  )
  return c
