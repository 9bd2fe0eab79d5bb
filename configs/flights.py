"""SFT then RL on flight booking with JSON tool calls, tiny preset, CPU.

  python -m agentic_rl.main --config=configs/flights.py:gigpo \
      --workdir=runs/flights_gigpo

`arg` is read as in `configs/sokoban.py`: one estimator variant (grpo,
dr_grpo, rloo, reinforce_pp, gigpo, gigpo_std, turn_discounted,
prm_weighted; default gigpo) and optionally `smoke` (a run of about a
minute for CI). The recipe is Sokoban's; the environment, the protocol
(`tool_call`) and the token budgets differ: an expert episode is four or
more tool calls of 50-110 tokens each, each answered by a 50-120 token
observation, so turns need `max_new_tokens=128` and contexts 1024 tokens.

Expected (2-core CPU, default size): the SFT policy learns the call format
from the scripted expert (search, filter, check seats in price order,
book); RL moves the booking success rate. See
experiments/credit_assignment/README.md.
"""

import ml_collections

from configs import sokoban

ESTIMATORS = sokoban.ESTIMATORS


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  c, smoke = sokoban.unit_success_config(arg)
  # No tool manual in the prompt: SFT teaches the call format, and the
  # manual would be ~250 tokens of every context on a CPU.
  c.env = {"name": "flights", "options": {"instructions": False}}
  c.rollout.protocol = "tool_call"
  c.rollout.max_turns = 8  # tasks allow the expert's calls plus 3
  c.rollout.max_new_tokens = 128
  c.rollout.max_total_tokens = 1024
  c.sampler.max_len = 1024
  c.length_buckets = (256, 384, 512, 640, 768, 1024)
  # The environment reports `progress` for each first useful call (right
  # search, exact filter, seat check of the answer): PRM evidence.
  c.rewards.process.signals = ("valid_action", "env:progress")
  if smoke:
    c.sampler.max_len = 1024
    c.rollout.max_turns = 6
    c.length_buckets = (256, 512, 1024)
  return c
