"""FrozenLake at 30 moves: does a learned critic help where states recur?

  python scripts/sweep.py \
      --config=configs/ablations/frozenlake_critic.py:seeds=5 \
      --root=experiments/frozenlake_critic/runs --workers=2

Question: on Sokoban, PPO's critic (GAE over turns, `configs/sokoban.py:ppo`)
explained at most 19% of the return variance and ended below GiGPO
(experiments/sokoban_critic/README.md): it had to generalise across the
new rooms of every step, where GiGPO reads its per-turn baselines from
states that recur within a group. A 4x4 lake has 16 cells and an agent
revisits them (99% of turns share their cell with another turn of their
group at 30 moves), so a state-value is easier to learn here, and slips
make returns noisy, which a good V should absorb. Does PPO reach or beat
GiGPO on FrozenLake?

The grid is `frozenlake_horizon`'s (the credit-assignment FrozenLake arm
at a 30-move horizon, 1,024-token sequences), so its SFT stages and its
grpo and gigpo runs are the same runs as there and pair seed for seed
with ppo. The critic section is `configs/frozenlake.py`'s (values in
success units: scale 1, clip 0.2; 4 passes a batch at lr 3e-3).
`arg`: as `frozenlake_horizon` ('', 'smoke' or 'seeds=N').
Measured: experiments/frozenlake_critic/README.md.
"""

import ml_collections

from configs.ablations import frozenlake_horizon

ESTIMATORS = ("grpo", "gigpo", "ppo")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  return frozenlake_horizon.get_config(
    arg, name="frozenlake_critic", estimators=ESTIMATORS
  )
