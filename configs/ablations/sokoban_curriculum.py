"""Sokoban: does a success-rate curriculum beat uniform task sampling?

  python scripts/sweep.py --config=configs/ablations/sokoban_curriculum.py \
      --root=experiments/sokoban_curriculum/runs --workers=2

Question: RL trains on three difficulties (0: 6x6 one box, 1: 7x7 one box,
2: 7x7 two boxes; `envs.sokoban.DIFFICULTIES`) after a cold start whose
demos are all difficulty 0 (the first `sft.num_demos` training tasks).
Is held-out success, on all three, higher when the tasks follow the
curriculum (`data.curriculum`: difficulty 0 alone until its success rate
over the last 128 episodes reaches `PROMOTE_THRESHOLD`, then the next
unlocks and takes 70% of the tasks, the mastered ones the rest) than when
every training task is equally likely? Arms:

  gigpo             `configs/sokoban.py:gigpo`, uniform over the three
  gigpo_curriculum  `configs/sokoban.py:gigpo,curriculum` with
                    promote_threshold PROMOTE_THRESHOLD

Both arms share the task pools (1,000 training levels per difficulty,
64 held-out), the SFT stage of each seed, its task-sampler seed and its
rollout keys; the grid is otherwise the credit-assignment sweep's
Sokoban arm (30 RL steps of 8 tasks x 8 rollouts). The held-out
evaluations log `eval/success_rate/d<k>` per difficulty. `arg`: as
`sokoban_reward_input` ('', 'smoke' or 'seeds=N'), plus `mixed`: the
cold start's demos spread evenly over the three difficulties
(`sft.demo_difficulties`), in every run of the sweep, and two more arms
that promote at 0.2, at once (`gigpo_curriculum_t20`) or once the rate
has held for 256 episodes (`gigpo_curriculum_t20_h256`):

  python scripts/sweep.py \
      --config=configs/ablations/sokoban_curriculum.py:mixed,seeds=3 \
      --root=experiments/sokoban_curriculum_mixed/runs --workers=2

Measured: experiments/sokoban_curriculum/README.md and
experiments/sokoban_curriculum_mixed/README.md.
"""

import ml_collections

from configs import sokoban
from configs.ablations import credit_assignment

DIFFICULTIES = (0, 1, 2)
# The configs/sokoban.py switch promotes at 0.5; greedy held-out success
# after SFT is 4-32% on difficulty 0 across seeds 0-2 (sokoban_replay), so
# at 0.5 the frontier would rarely move within 30 steps and the arm would
# only measure "difficulty 0 alone".
PROMOTE_THRESHOLD = 0.35
ARMS = {
  "gigpo_curriculum": {
    "variant": "gigpo,curriculum",
    "overrides": {"curriculum": {"promote_threshold": PROMOTE_THRESHOLD}},
  }
}
# From the mixed cold start, difficulty 0's training success over the last
# 128 episodes peaked at 0.34 and 0.30 (seeds 0, 1): at 0.35 neither run
# unlocked difficulty 1. At 0.2 they do, at steps 8 and 16.
MIXED_ARMS = {
  **ARMS,
  "gigpo_curriculum_t20": {
    "variant": "gigpo,curriculum",
    "overrides": {"curriculum": {"promote_threshold": 0.2}},
  },
  # Simulated with the task spread those runs logged, 0.2 promotes a policy
  # at a true 15% by step 3 at the median; holding the rate for 256
  # episodes (4 steps) first cuts that to 2.6% of runs
  # (experiments/curriculum_promotion).
  "gigpo_curriculum_t20_h256": {
    "variant": "gigpo,curriculum",
    "overrides": {"curriculum": {"promote_threshold": 0.2, "hold": 256}},
  },
}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  seeds, smoke, switches = credit_assignment.parse_switches(arg, ("mixed",))
  mixed = "mixed" in switches
  c = sokoban.get_config("gigpo,smoke" if smoke else "gigpo")
  tasks = {
    "difficulties": DIFFICULTIES,
    "train_counts": (1000,) * len(DIFFICULTIES),
    "eval_counts": (64,) * len(DIFFICULTIES),
  }
  smoke_tasks = {
    "difficulties": (0, 1),
    "train_counts": (8, 8),
    "eval_counts": (2, 2),
  }
  changes, smoke_changes = {"tasks": tasks}, {"tasks": smoke_tasks}
  if mixed:  # the SFT stages too: they take the sweep's common overrides
    changes["sft"] = {"demo_difficulties": DIFFICULTIES}
    smoke_changes["sft"] = {"demo_difficulties": smoke_tasks["difficulties"]}
  arms = MIXED_ARMS if mixed else ARMS
  c.sweep = credit_assignment.one_env_sweep(
    "sokoban_curriculum_mixed" if mixed else "sokoban_curriculum",
    "sokoban",
    ("gigpo", *arms),
    seeds,
    smoke,
    changes=changes,
    smoke_changes=smoke_changes,
  )
  c.sweep.baseline = "gigpo"
  c.sweep.arms = arms
  return c
