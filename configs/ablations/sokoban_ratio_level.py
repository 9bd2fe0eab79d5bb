"""Sokoban: importance ratio per token, per turn or per episode (GSPO)?

  python scripts/sweep.py \
      --config=configs/ablations/sokoban_ratio_level.py:seeds=8 \
      --root=experiments/sokoban_ratio_level/runs --workers=2

Question: PPO's ratio and clip act on single tokens, but an agent acts in
turns, and a sequence-level ratio (GSPO) is the geometric mean over the
whole episode. Which unit makes GiGPO's off-policy minibatches most
stable and most sample-efficient on multi-turn Sokoban? Arms (the same
estimator, `configs/sokoban.py:gigpo`; `loss.ratio_level`, see
`losses.PolicyLossConfig`):

  gigpo            per token, clip 0.2 / 0.28 (the project's default)
  gigpo_turn       per turn (geometric mean over the turn's action
                   tokens), the same clip range
  gigpo_sequence   per episode, GSPO's clip range 3e-4 / 4e-4
  gigpo_turn_tight per turn, a quarter of PPO's clip range (0.05 / 0.07):
                   the turn arm moved furthest from the SFT policy, since
                   its clip bounds a turn's mean log-ratio, not each
                   token's; does a tighter range rein it in?

The grid is `sokoban_reward_input`'s (the credit-assignment Sokoban arm:
size, SFT stages, task order, rollout keys), except that an RL batch is
split into 4 minibatches of 16 episodes instead of 2 of 32: the first
update of a batch is on-policy, where the three ratios coincide
(`tests/test_losses.py`), so more updates per batch give the ratio's unit
more to decide. Every arm, the token baseline included, runs with it.

`arg`: as `sokoban_reward_input` ('', 'smoke' or 'seeds=N'). Seeds 0-4
ran (`experiments/sokoban_ratio_level/`: 5 x 4 RL runs of ~6-11 minutes
and 5 SFT stages, two at a time; the fourth arm was added later on the
same root, another 50 minutes with the stages rerun).
"""

import ml_collections

from configs import sokoban
from configs.ablations import credit_assignment

ARMS = {
  "gigpo_turn": {"loss": {"ratio_level": "turn"}},
  "gigpo_sequence": {
    "loss": {"ratio_level": "sequence", "clip_low": 3e-4, "clip_high": 4e-4}
  },
  "gigpo_turn_tight": {
    "loss": {"ratio_level": "turn", "clip_low": 0.05, "clip_high": 0.07}
  },
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  seeds, smoke = credit_assignment.parse_arg(arg)
  c = sokoban.get_config("gigpo,smoke" if smoke else "gigpo")
  c.sweep = credit_assignment.one_env_sweep(
    "sokoban_ratio_level",
    "sokoban",
    ("gigpo", *ARMS),
    seeds,
    smoke,
    changes={"rl": {"steps": 30, "minibatch_size": 16}},
  )
  c.sweep.baseline = "gigpo"
  c.sweep.arms = {
    name: {"variant": "gigpo", "overrides": overrides}
    for name, overrides in ARMS.items()
  }
  return c
