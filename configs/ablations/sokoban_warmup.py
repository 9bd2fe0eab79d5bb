"""Sokoban: should the RL recipe warm its learning rate up, and hold its
activations with remat?

  python scripts/sweep.py --config=configs/ablations/sokoban_warmup.py \
      --root=experiments/sokoban_warmup/runs --workers=2

Question: Sokoban's RL optimizer starts at its full rate (3e-4). Adam's
first step moves every parameter by about the rate whatever its gradient,
and on one seed of six (seed 5) that first step put the policy 7-11 nats
of KL from its SFT stage, with gradient norms of 80-160, in every arm of
experiments/sokoban_dynamic. With `rl.optimizer.warmup_steps=4` that step
read KL 0.0000 (experiments/sokoban_width/probe_seed5). Code repair's
recipe already warms up over 10 updates. Does a warm-up change what RL
reaches on Sokoban, for GiGPO and for GRPO? And remat (`model.remat=
"full"`) cuts an update's activation memory 3.6x at these shapes
(experiments/benchmarks/remat_tiny_rl_minibatches.json) for the same
arithmetic up to rounding: does switching it on leave held-out success
where it was? Arms:

  gigpo         `configs/sokoban.py:gigpo` (the baseline)
  gigpo_warmup  gigpo, rl.optimizer.warmup_steps=10 (5 RL steps of 2
                updates: the rate rises linearly from 0)
  grpo          `configs/sokoban.py:grpo`
  grpo_warmup   grpo, the same warm-up
  gigpo_remat   gigpo, model.remat="full" in RL (the SFT stage is shared
                and ran without it; remat is not a warm-start field)

Each new arm differs from its plain one in that one override. The grid
is sokoban_dynamic's (shared SFT stages, task order, rollout keys, 30 RL
steps of 8 tasks x 8 episodes, 128 held-out levels): its gigpo and grpo
runs are these arms' runs, and its SFT stages these (`--stages_from`).
`arg`: as `sokoban_reward_input` ('', 'smoke' or 'seeds=N').

Measured (6 seeds): experiments/sokoban_warmup/.
"""

import ml_collections

from configs import sokoban
from configs.ablations import credit_assignment

ARMS = ("gigpo", "gigpo_warmup", "grpo", "grpo_warmup", "gigpo_remat")
WARMUP_STEPS = 10  # optimizer steps, as code repair's RL recipe
# Besides every arm against gigpo: GRPO's warm-up against GRPO, and the
# two estimators against each other with the warm-up.
PAIRS = ("grpo:grpo_warmup", "grpo_warmup:gigpo_warmup")


def arms() -> dict:
  warmup = {"rl": {"optimizer": {"warmup_steps": WARMUP_STEPS}}}
  return {
    "gigpo_warmup": {"variant": "gigpo", "overrides": warmup},
    "grpo_warmup": {"variant": "grpo", "overrides": warmup},
    "gigpo_remat": {
      "variant": "gigpo",
      "overrides": {"model": {"remat": "full"}},
    },
  }


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  seeds, smoke = credit_assignment.parse_arg(arg)
  c = sokoban.get_config("gigpo,smoke" if smoke else "gigpo")
  c.sweep = credit_assignment.one_env_sweep(
    "sokoban_warmup", "sokoban", ARMS, seeds, smoke
  )
  c.sweep.baseline = "gigpo"
  c.sweep.pairs = PAIRS
  c.sweep.arms = arms()
  return c
