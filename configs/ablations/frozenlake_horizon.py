"""FrozenLake with room to succeed: GRPO vs GiGPO at a 30-move horizon.

  python scripts/sweep.py --config=configs/ablations/frozenlake_horizon.py \
      --root=experiments/frozenlake_horizon/runs --workers=2

Question: in the credit-assignment sweep, slippery FrozenLake separated no
estimator, but there the episode ended after 10 moves, where even the
exact optimal policy reaches the goal on only 12.6% of the 128 held-out
maps (finite-horizon dynamic programming over the exact slip model,
`exact.optimal_finite`; experiments/credit_assignment/README.md): little
success to assign credit for. With 30 moves the optimal policy reaches
71.2% (uniform random moves 11.4%). GiGPO's per-cell groups are full at
either horizon (a 4x4 map has 16 cells: 97% of turns share their cell
with another turn of their group at 10 moves, 99% at 30, for uniform
moves and 8 rollouts a task); what the horizon adds is success to rank.
Does GiGPO then pull away from GRPO?

The grid is the credit-assignment sweep's FrozenLake arm (same recipe,
seeds, RL length, 128 held-out maps) with the move limit and the turn
budget raised from 10 to 30, and the sequence length from 768 to 1,024
tokens (~30 tokens a turn). The SFT stage (value-iteration demonstrations
at the same horizon) runs once per seed and both estimators start RL from
it.

`arg`: empty, `smoke` (smoke-size runs, one seed) or `seeds=N` (seeds
0..N-1; the write-up ran `seeds=5`). Expected: see
experiments/frozenlake_horizon/README.md.
"""

import ml_collections

from configs import frozenlake
from configs.ablations import credit_assignment

ESTIMATORS = ("grpo", "gigpo")
HORIZON = 30
MAX_LEN = 1024


def get_config(
  arg: str | None = None,
  name: str = "frozenlake_horizon",
  estimators: tuple[str, ...] = ESTIMATORS,
) -> ml_collections.ConfigDict:
  """This sweep; or, with `name` and `estimators`, another sweep on its
  grid (frozenlake_critic), whose runs of the same name are these."""
  seeds, smoke = credit_assignment.parse_arg(arg)
  c = frozenlake.get_config("grpo,smoke" if smoke else "grpo")
  horizon = {
    "env": {"options": {"max_steps": HORIZON}},
    "rollout": {"max_turns": HORIZON, "max_total_tokens": MAX_LEN},
    "sampler": {"max_len": MAX_LEN},
    "length_buckets": (128, 192, 256, 320, 384, 512, 640, 768, 896, MAX_LEN),
  }
  c.sweep = credit_assignment.one_env_sweep(
    name,
    "frozenlake",
    estimators,
    seeds,
    smoke,
    changes=horizon,
    # smoke-size runs that still take more than the default 3 moves
    smoke_changes={
      "env": {"options": {"max_steps": 5}},
      "rollout": {"max_turns": 5},
    },
  )
  return c
