"""Sokoban: is GiGPO's lead over GRPO per-turn credit, or its reward?

  python scripts/sweep.py --config=configs/ablations/sokoban_reward_input.py \
      --root=experiments/sokoban_reward_input/runs --workers=2

Question: in the credit-assignment sweep, GiGPO ended 5-13 points above
GRPO on every Sokoban seed. The two differ twice: GiGPO gives each turn its
own credit, and it ranks by the per-turn rewards (step cost -0.1, box
±1, solve +10, failure penalties) where GRPO ranks by solved-or-not.
`grpo_return` is GRPO ranking whole episodes by their summed per-turn
rewards: GiGPO's reward without its per-turn credit. Where it lands between
GRPO and GiGPO splits the lead between the two causes.

The grid is the credit-assignment sweep's Sokoban arm (same size, seeds,
SFT stages, task order) for grpo, grpo_return and gigpo. All three arms
are run here, SFT stages included, rather than linking in that sweep's
grpo and gigpo runs: those ran on older code, and a numerically
equivalent code change alone moved their final success by up to 6 points.

`arg`: empty, `smoke` (smoke-size runs, one seed), or `seeds=N` (seeds
0..N-1 instead of the credit-assignment sweep's 0, 1, 2; the runs of
seeds 0-2 are the same, so a finished 3-seed root is extended in place).
Expected: see experiments/sokoban_reward_input/README.md.
"""

import ml_collections

from configs import sokoban
from configs.ablations import credit_assignment

ESTIMATORS = ("grpo", "grpo_return", "gigpo")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  seeds, smoke = credit_assignment.parse_arg(arg)
  c = sokoban.get_config("grpo,smoke" if smoke else "grpo")
  c.sweep = credit_assignment.one_env_sweep(
    "sokoban_reward_input", "sokoban", ESTIMATORS, seeds, smoke
  )
  return c
