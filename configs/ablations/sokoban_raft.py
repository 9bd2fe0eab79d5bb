"""Sokoban: does credit assignment beat fitting the successes?

  python scripts/sweep.py --config=configs/ablations/sokoban_raft.py:seeds=8 \
      --root=experiments/sokoban_raft/runs --workers=2

Question: RL with a group baseline (GRPO) or per-turn credit (GiGPO)
against the simplest online baseline: the policy samples, the verified
successes are kept, and it fits them (`raft`: RAFT, expert iteration,
online rejection-sampling fine-tuning; advantage 1 for a solved episode,
0 otherwise: no baseline and nothing pushed down). Offline, fitting a
teacher's kept solutions beat the teacher's own RL by 10 points
(experiments/distill/); does the same filter, online and on the policy's
own samples, keep up with the estimators?

The grid is `sokoban_reward_input`'s (the credit-assignment sweep's
Sokoban arm: size, SFT stages, task order, rollout keys), so its grpo and
gigpo runs pair seed for seed with raft where the code is the same.
`arg`: as `sokoban_reward_input` ('', 'smoke' or 'seeds=N').
Measured: experiments/sokoban_raft/README.md.
"""

import ml_collections

from configs import sokoban
from configs.ablations import credit_assignment

ESTIMATORS = ("grpo", "gigpo", "raft")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  seeds, smoke = credit_assignment.parse_arg(arg)
  c = sokoban.get_config("grpo,smoke" if smoke else "grpo")
  c.sweep = credit_assignment.one_env_sweep(
    "sokoban_raft", "sokoban", ESTIMATORS, seeds, smoke
  )
  return c
