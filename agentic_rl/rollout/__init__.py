"""Multi-turn rollout: sampler slots on the device, environments on the host.

`Rollout(samplers, tokenizer, env_factory, reward_stack, config).run(tasks,
key, policy_version)` plays G episodes per task and returns scored
trajectories; `agentic_rl.data.packing.pack` turns them into a
`TrajectoryBatch`. `evaluate` runs held-out tasks greedily and reports success
rate, return, lengths and failure rates.
"""

from agentic_rl.rollout.config import DEFAULT_STOP_TAGS, RolloutConfig
from agentic_rl.rollout.driver import (
  OVERFLOW_ACTION,
  OVERFLOW_OBSERVATION,
  OVERFLOW_PROMPT,
  Rollout,
  RolloutProcessError,
  env_factory_from_options,
  make_samplers,
)
from agentic_rl.rollout.evaluation import (
  eval_metrics,
  evaluate,
  expert_ceiling,
  fits_context,
  play,
  solved_by_task,
)
from agentic_rl.rollout.metrics import (
  failure_codes,
  generated_tokens,
  group_metrics,
  rollout_metrics,
)

__all__ = [
  "DEFAULT_STOP_TAGS",
  "OVERFLOW_ACTION",
  "OVERFLOW_OBSERVATION",
  "OVERFLOW_PROMPT",
  "Rollout",
  "RolloutConfig",
  "RolloutProcessError",
  "env_factory_from_options",
  "eval_metrics",
  "evaluate",
  "expert_ceiling",
  "failure_codes",
  "fits_context",
  "generated_tokens",
  "group_metrics",
  "make_samplers",
  "play",
  "rollout_metrics",
  "solved_by_task",
]
