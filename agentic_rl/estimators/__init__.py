"""Credit-assignment estimators: pure, jittable functions of arrays.

Outcome level (`adv_B`): `grpo` (Dr.GRPO with normalize_std=False), `rloo`,
`reinforce_pp_baseline`, `raft` (online rejection-sampling fine-tuning).
Turn level (`adv_BxT`): `discounted_returns`, `gigpo`, `turn_discounted`,
`prm_weighted`. Token level: `gae`. With a learned critic: `critic_gae`
(GAE per turn or per token, registered as "gae" with `uses_values`; the
loop trains the critic). Configs pick
one by name through the registry (`get`, `register`, `from_config`);
`types.turns_to_tokens` broadcasts `adv_BxT` to tokens. `batch_divisor`
(`rl.advantage_scale`) puts every estimator's advantages on one scale per
RL step, so a KL or entropy coefficient weighs the same against each;
`RunningScale` (`rl.advantage_scale_decay`) divides by a running mean of
the steps' statistics instead.

Singleton groups (a group, or baseline set, of one), where reference
implementations disagree, are a named option `singleton`: "raw" (mean 0,
std 1: the advantage is the value itself; verl's GRPO and GiGPO episode
convention, default for grpo/gigpo) or "zero" (no baseline, no signal;
default for rloo, turn_discounted; always used for GiGPO's step groups, as
the paper specifies).
"""

from agentic_rl.estimators.critic import CriticEstimate, critic_gae
from agentic_rl.estimators.gae import gae
from agentic_rl.estimators.outcome import (
  grpo,
  raft,
  reinforce_pp_baseline,
  rloo,
)
from agentic_rl.estimators.registry import (
  EstimatorConfigError,
  check_estimator,
  from_config,
  get,
  names,
  register,
  uses_values,
)
from agentic_rl.estimators.scale import (
  SCALES,
  RunningScale,
  batch_divisor,
  batch_statistic,
  check_decay,
  check_scale,
)
from agentic_rl.estimators.turn import (
  discounted_returns,
  gigpo,
  prm_weighted,
  turn_discounted,
)

__all__ = [
  "SCALES",
  "CriticEstimate",
  "EstimatorConfigError",
  "RunningScale",
  "batch_divisor",
  "batch_statistic",
  "check_decay",
  "check_estimator",
  "check_scale",
  "critic_gae",
  "discounted_returns",
  "from_config",
  "gae",
  "get",
  "gigpo",
  "grpo",
  "names",
  "prm_weighted",
  "raft",
  "register",
  "reinforce_pp_baseline",
  "rloo",
  "turn_discounted",
  "uses_values",
]
