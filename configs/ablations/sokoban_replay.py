"""Sokoban: does replaying past trajectories help GiGPO?

  python scripts/sweep.py --config=configs/ablations/sokoban_replay.py \
      --root=experiments/sokoban_replay/runs --workers=2

Question: with a quarter of each update's rows drawn from a prioritized
buffer of past rollouts (`configs/sokoban.py:gigpo,replay`: capacity 512
trajectories, priority = mean |advantage| of the turns, half-life 256
trajectories; each replayed row keeps the per-turn advantages it was
given when fresh and its behaviour log-probs, and the clipped ratio
corrects for its staleness), does held-out success move differently from
plain GiGPO from the same SFT policy? Arms:

  gigpo             `configs/sokoban.py:gigpo`
  gigpo_replay      `configs/sokoban.py:gigpo,replay` (the arm's variant:
                    the `replay` switch, nothing else changed)
  gigpo_replay_f05  the same with `replay.fraction=0.5`: 32 replayed rows
                    beside the 64 fresh ones instead of 16 (a dose: does
                    more replay move held-out success further?)
  gigpo_replay_fifo the same as gigpo_replay with `replay.mode=fifo`: rows
                    drawn uniformly from the last 512 trajectories, none
                    evicted by priority (is it the |advantage| priority,
                    or reuse alone?)
  gigpo_replay_a2   priority exponent 2 instead of 1 (`replay.alpha`):
                    draws lean harder toward large |advantage|
  gigpo_replay_nodecay  no recency in the priority (`replay.half_life`
                    1e9 instead of 256 trajectories): large-|advantage|
                    rows stay and come back however old

The grid is the credit-assignment sweep's Sokoban arm (size, shared SFT
stages, task order, rollout keys: 30 RL steps of 8 tasks x 8 rollouts,
final success on 128 held-out levels). `arg`: as `sokoban_reward_input`
('', 'smoke' or 'seeds=N'), and optionally `long`: does the late lead
hold? The first two arms only, 50 RL steps with a held-out evaluation
every 5 (in its own root: its runs share no RL steps with the 30-step
ones, only the SFT stages' recipe).

  python scripts/sweep.py --config=configs/ablations/sokoban_replay.py:long \
      --root=experiments/sokoban_replay/runs_long --workers=2

Measured: experiments/sokoban_replay/.
"""

import ml_collections

from configs import sokoban
from configs.ablations import credit_assignment

ARMS = {
  "gigpo_replay": {"variant": "gigpo,replay"},
  "gigpo_replay_f05": {
    "variant": "gigpo,replay",
    "overrides": {"replay": {"fraction": 0.5}},
  },
  "gigpo_replay_fifo": {
    "variant": "gigpo,replay",
    "overrides": {"replay": {"mode": "fifo"}},
  },
  "gigpo_replay_a2": {
    "variant": "gigpo,replay",
    "overrides": {"replay": {"alpha": 2.0}},
  },
  "gigpo_replay_nodecay": {
    "variant": "gigpo,replay",
    "overrides": {"replay": {"half_life": 1e9}},
  },
}


# `long`: the length and the evaluation grid that would show whether
# replay's lead at step 30 holds (the 30-step runs evaluate at 0/10/20/30).
LONG = {"rl": {"steps": 50}, "eval_every": 5}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  seeds, smoke, switches = credit_assignment.parse_switches(arg, ("long",))
  long = "long" in switches
  arms = {"gigpo_replay": ARMS["gigpo_replay"]} if long else ARMS
  c = sokoban.get_config("gigpo,smoke" if smoke else "gigpo")
  c.sweep = credit_assignment.one_env_sweep(
    "sokoban_replay_long" if long else "sokoban_replay",
    "sokoban",
    ("gigpo", *arms),
    seeds,
    smoke,
    changes=LONG if long else None,
  )
  c.sweep.baseline = "gigpo"
  c.sweep.arms = arms
  return c
