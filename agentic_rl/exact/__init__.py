"""Exact credit assignment on enumerable environments.

On FrozenLake and small Sokoban levels every reachable state can be listed,
so for a Markov policy the true per-turn advantage A_t(s, a) = Q_t(s, a) -
V_t(s) follows from finite-horizon dynamic programming. `study` samples
rollout batches from the same policy and measures how well each registered
estimator's per-turn advantages agree with that truth, as a function of the
group size.

  mdp     `TabularMDP`, `frozenlake_mdp`, `sokoban_mdp`, `evaluate`,
          `advantages`, `optimal_q`, `optimal_finite` (the best success
          within a turn budget)
  policy  `uniform_policy`, `softmax_policy`, `model_policy` (the LM's
          Markov policy by teacher forcing the four move texts)
  study   `sample_episodes`, `to_trajectories`, `compare`, `run_study`,
          `default_specs`, reporting helpers
"""

from agentic_rl.exact.mdp import (
  TabularMDP,
  advantages,
  backup,
  evaluate,
  frozenlake_mdp,
  optimal_finite,
  optimal_q,
  sokoban_mdp,
)
from agentic_rl.exact.policy import (
  action_texts,
  model_policy,
  move_logprobs,
  softmax_policy,
  uniform_policy,
)
from agentic_rl.exact.study import (
  Episodes,
  Spec,
  compare,
  critic_spec,
  default_specs,
  gigpo_step_spec,
  oracle_spec,
  registry_spec,
  run_study,
  sample_episodes,
  to_trajectories,
  true_advantages,
)

__all__ = [
  "Episodes",
  "Spec",
  "TabularMDP",
  "action_texts",
  "advantages",
  "backup",
  "compare",
  "default_specs",
  "evaluate",
  "frozenlake_mdp",
  "critic_spec",
  "gigpo_step_spec",
  "model_policy",
  "move_logprobs",
  "optimal_finite",
  "optimal_q",
  "oracle_spec",
  "registry_spec",
  "run_study",
  "sample_episodes",
  "sokoban_mdp",
  "softmax_policy",
  "to_trajectories",
  "true_advantages",
  "uniform_policy",
]
