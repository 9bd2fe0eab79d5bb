"""Sokoban: at a fixed budget of episodes, more RL steps or wider ones?

  python scripts/sweep.py --config=configs/ablations/sokoban_budget.py \
      --root=experiments/sokoban_budget/runs --workers=2

Question: in experiments/sokoban_width, GiGPO playing 2x or 3x the tasks
a step (`gigpo_2x`, `gigpo_wide`) beat plain GiGPO after 30 RL steps by
6 and 9 points of late held-out success, but read at the most episodes
both had played (1,920, plain GiGPO's whole run) the wide arm was 5
points below plain, and 2x level with it. That reading stops where plain
GiGPO stops. This sweep lets plain GiGPO play the wide arm's whole budget
and asks which way of spending 5,760 episodes reaches more:

  gigpo       `configs/sokoban.py:gigpo` (the baseline): 30 steps of 8
              tasks x 8 episodes
  gigpo_2x    16 tasks x 8 a step, minibatches 2x as large (sokoban_width)
  gigpo_wide  24 tasks x 8 a step, minibatches 3x (sokoban_width)
  gigpo_long  gigpo for 3x the steps (90): wide's episodes, in 3x the
              optimizer updates of gigpo's size
  grpo, grpo_wide, grpo_long
              the same for GRPO (`configs/sokoban.py:grpo`; its wide arm
              is sokoban_dynamic's, 24 tasks a step): does GRPO also
              follow the episodes played, and does GiGPO's per-turn
              credit, level with GRPO's after 30 steps of 8 tasks
              (experiments/sokoban_reward_input), pull ahead when both
              play 5,760 episodes?
  grpo_long_lr2x
              grpo_long at twice the RL learning rate (6e-4): is GRPO's
              slower climb over 90 steps a matter of step size?
  grpo_long_kl_matched
              grpo_long with its KL and entropy coefficients scaled by
              `ADV_RATIO`, GRPO's mean |advantage| over GiGPO's: Adam
              ignores the loss's scale, so this weighs the penalties
              against the policy gradient as GiGPO's loss does (its
              advantages are 7x GRPO's, so at one kl_coef GRPO is held
              7x harder to its SFT policy). Is that GiGPO's lead?
  gigpo_long_advnorm, grpo_long_advnorm
              gigpo_long and grpo_long with `rl.advantage_scale`
              "mean_abs" (each step's advantages divided by their mean
              |advantage|), so one KL and entropy coefficient anchors both
              alike, and those coefficients divided by `GIGPO_ADV`
              (gigpo_long's mean |advantage|) so the anchor stays where
              gigpo_long's was: the built-in way to the kl_matched
              comparison, step by step instead of by a measured constant.
  grpo_long_advnorm_ema
              grpo_long_advnorm dividing by a running mean of the steps'
              mean |advantage| (`rl.advantage_scale_decay` 0.9, about the
              last 10 steps) instead of each step's own: a step whose
              groups are nearly all alike has a few small advantages,
              and on its own statistic they were multiplied up to 15x.
  gigpo_long_advnorm_ema
              the same running divisor for GiGPO, whose per-step
              divisor swings more (its smallest step statistic is about
              4x below its mean): is normalized GiGPO's lower step-90
              evaluation the per-step reweighting?

The task sampler draws one task at a time from one stream, so the long
arm plays the wide arm's 720 tasks in the same order (8 a step, not 24),
and its evaluations every 10 steps fall at 640-episode multiples: steps
30, 60 and 90 are wide's steps 10, 20, 30 and 2x's steps 15, 30 in
episodes played. The learning rate is constant (3e-4), so 90 steps run
the same schedule longer. Everything else is sokoban_width's grid (shared
SFT stages, rollout keys, 128 held-out levels): its gigpo, gigpo_2x and
gigpo_wide runs are these arms' runs, and sokoban_dynamic's grpo and
grpo_wide runs (the same grid) the GRPO arms'. `arg`: as
`sokoban_reward_input` ('', 'smoke' or 'seeds=N').

Measured (6 seeds): experiments/sokoban_budget/. Both estimators follow
the episodes played (long and wide end level); at 5,760 episodes
gigpo_long is 9.4 points [4.7, 14.1] above grpo_long (late 4.5 [2.4,
6.5]), level at 1,920; grpo_long_lr2x is grpo_long's equal late (+0.7
[-2.2, 3.6]) and 3.8 [2.0, 5.6] below gigpo_long; grpo_long_kl_matched
is 3.5 [0.8, 6.1] above grpo_long late and 1.0 [-0.5, 2.5] below
gigpo_long. grpo_long_advnorm (seeds 0-2) is level with kl_matched
(late +0.6 [-6.1, 7.4], 42 / 43 levels), and gigpo_long_advnorm
(seeds 0-2) level with it late (+1.0 [-6.5, 8.5]; final -4.9 [-16.3,
6.4], levels 54 / 35 grpo_long_advnorm's way, p 0.056).
grpo_long_advnorm_ema (seeds 1-2) keeps the divisor steadier (seed 1:
0.40-0.60 against 0.17-0.80) and is level with grpo_long_advnorm
(late -0.4, levels 30 / 22, p 0.33). On one machine (seeds 1-2,
experiments/sokoban_budget/same_machine/) gigpo_long_advnorm's lower
final evaluation is gone (-0.4, levels 34 / 33): gigpo_long run again on
another CPU splits the levels 38 / 23 against itself.
gigpo_long_advnorm_ema holds GiGPO's divisor in 3.35-4.63 (per-step
0.49-7.34 on seed 1) and learns as the other two (late +0.1 and -1.1);
over seeds 0-3 on one machine it is ahead of gigpo_long at step 90 (+4.5
[1.7, 7.2]) but level on the late mean (0.0 [-4.2, 4.3]).
There (seeds 0-4) gigpo_long leads grpo_long late and in AUC on every
seed (late +2.0 [0.5, 3.4], AUC +1.6 [1.0, 2.2], sign-test p 0.062) but
not clearly in the final evaluation (+2.7 [-5.2, 10.5], levels 58 / 75,
p 0.17); the running divisor is ahead of grpo_long late on every seed
(seeds 0-4: +3.0 [0.6, 5.3]) and leaves GiGPO level with GRPO (seeds
0-3: late -1.6 [-4.3, 1.1]).
"""

import ml_collections

from configs import sokoban
from configs.ablations import credit_assignment, sokoban_dynamic, sokoban_width

ARMS = (
  "gigpo",
  "gigpo_2x",
  "gigpo_wide",
  "gigpo_long",
  "grpo",
  "grpo_wide",
  "grpo_long",
  "grpo_long_lr2x",
  "grpo_long_kl_matched",
  "gigpo_long_advnorm",
  "grpo_long_advnorm",
  "grpo_long_advnorm_ema",
  "gigpo_long_advnorm_ema",
)
# Mean |advantage| per RL step, grpo_long over gigpo_long (6 seeds each,
# experiments/sokoban_budget/arm_stats.json: 0.456 / 3.369).
ADV_RATIO = 0.135
# gigpo_long's mean |advantage| per RL step (the same file).
GIGPO_ADV = 3.369
# Besides every arm against gigpo: each long arm against its wider arms
# (read at equal episodes, 3,840 and 5,760, by the report), then GRPO
# against GiGPO at each way of spending the episodes.
PAIRS = (
  "gigpo_2x:gigpo_long",
  "gigpo_wide:gigpo_long",
  "grpo:grpo_long",
  "grpo_wide:grpo_long",
  "grpo_long:gigpo_long",
  "grpo_long:grpo_long_lr2x",
  "grpo_long_lr2x:gigpo_long",
  "grpo_long:grpo_long_kl_matched",
  "grpo_long_kl_matched:gigpo_long",
  "grpo_long_advnorm:gigpo_long_advnorm",
  "gigpo_long:gigpo_long_advnorm",
  "grpo_long_kl_matched:grpo_long_advnorm",
  "grpo_long:grpo_long_advnorm",
  "grpo_long_advnorm:gigpo_long",
  "grpo_long_advnorm:grpo_long_advnorm_ema",
  "grpo_long_kl_matched:grpo_long_advnorm_ema",
  "gigpo_long_advnorm:gigpo_long_advnorm_ema",
  "gigpo_long:gigpo_long_advnorm_ema",
)
# The running divisor's decay (the *_advnorm_ema arms).
EMA_DECAY = 0.9


def arms(c: ml_collections.ConfigDict, rl_steps: int) -> dict:
  """The wider arms (sokoban_width's and sokoban_dynamic's, scaled from
  `c`), and gigpo and grpo for as many steps as the widest arm's episodes
  take at the plain width."""
  width = sokoban_width.arms(c)
  long = {"rl": {"steps": sokoban_dynamic.WIDE * rl_steps}}
  advnorm = {
    "rl": {**long["rl"], "advantage_scale": "mean_abs"},
    "loss": {
      "kl_coef": c.loss.kl_coef / GIGPO_ADV,
      "entropy_coef": c.loss.entropy_coef / GIGPO_ADV,
    },
  }
  ema = {**advnorm, "rl": {**advnorm["rl"], "advantage_scale_decay": EMA_DECAY}}
  return {
    "gigpo_2x": width["gigpo_2x"],
    "gigpo_wide": width["gigpo_wide"],
    "gigpo_long": {"variant": "gigpo", "overrides": long},
    "grpo_wide": sokoban_dynamic.arms(c.rl)["grpo_wide"],
    "grpo_long": {"variant": "grpo", "overrides": long},
    "grpo_long_lr2x": {
      "variant": "grpo",
      "overrides": {
        "rl": {
          **long["rl"],
          "optimizer": {"learning_rate": 2 * c.rl.optimizer.learning_rate},
        }
      },
    },
    "grpo_long_kl_matched": {
      "variant": "grpo",
      "overrides": {
        **long,
        "loss": {
          "kl_coef": ADV_RATIO * c.loss.kl_coef,
          "entropy_coef": ADV_RATIO * c.loss.entropy_coef,
        },
      },
    },
    "gigpo_long_advnorm": {"variant": "gigpo", "overrides": advnorm},
    "grpo_long_advnorm": {"variant": "grpo", "overrides": advnorm},
    "grpo_long_advnorm_ema": {"variant": "grpo", "overrides": ema},
    "gigpo_long_advnorm_ema": {"variant": "gigpo", "overrides": ema},
  }


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  seeds, smoke = credit_assignment.parse_arg(arg)
  c = sokoban.get_config("gigpo,smoke" if smoke else "gigpo")
  c.sweep = credit_assignment.one_env_sweep(
    "sokoban_budget", "sokoban", ARMS, seeds, smoke
  )
  c.sweep.baseline = "gigpo"
  c.sweep.pairs = PAIRS
  steps = c.sweep.overrides.get("rl", {}).get("steps", c.rl.steps)
  c.sweep.arms = arms(c, steps)
  return c
