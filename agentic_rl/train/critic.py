"""The critic of PPO with a value model: its state, values, and update.

The critic is a `models.value.ValueModel` with its own optimizer state,
laid out on the policy's mesh by the same rules. When RL starts, its
trunk is a copy of the post-SFT policy and its head is zero
(`init_critic`). Each RL iteration the loop reads its values on the
rollout batch (`compute_values`), an estimator registered with
`uses_values` turns them into advantages and targets
(`estimators.critic_gae`), and the critic regresses onto the targets over
the same minibatches as the policy (`make_critic_step`, the shared
`update_step`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from agentic_rl import losses
from agentic_rl import sharding as shd
from agentic_rl.models.value import ValueModel
from agentic_rl.train import step as step_lib
from agentic_rl.train.state import (
  Layout,
  ModelState,
  OptimizerConfig,
  TrainState,
  check_known_keys,
  make_layout,
  make_optimizer,
)


class CriticConfigError(ValueError):
  """The `critic` config section is invalid."""


@dataclasses.dataclass(frozen=True)
class CriticConfig:
  """`optimizer`: the critic's own AdamW; `value_clip`: PPO value clipping
  (0 = off; in units of the returns); `epochs`: passes over each rollout
  batch (0: as `rl.epochs`); `value_scale`: the value head's output scale
  (`models.value.ValueModel`), about the size of the returns;
  `warmup_steps`: the first RL iterations train only the critic (the
  policy still plays, and is not updated; verl's `critic_warmup`)."""

  optimizer: OptimizerConfig = OptimizerConfig(learning_rate=1e-3)
  value_clip: float = 0.2
  epochs: int = 0
  value_scale: float = 1.0
  warmup_steps: int = 0

  def __post_init__(self):
    if not (math.isfinite(self.value_clip) and self.value_clip >= 0):
      raise CriticConfigError(
        f"value_clip must be a finite number >= 0: {self.value_clip}"
      )
    if not (math.isfinite(self.value_scale) and self.value_scale > 0):
      raise CriticConfigError(
        f"value_scale must be a finite number > 0: {self.value_scale}"
      )
    for name in ("warmup_steps", "epochs"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CriticConfigError(f"{name} must be an int >= 0: {value!r}")

  @classmethod
  def from_dict(cls, d: Any) -> CriticConfig:
    d = dict(d)
    check_known_keys(cls, d, "critic", CriticConfigError)
    if "optimizer" in d:
      d["optimizer"] = OptimizerConfig.from_dict(d["optimizer"])
    return cls(**d)


@flax.struct.dataclass
class CriticInputs:
  """Row-aligned [B, L] arrays of one critic update."""

  tokens_BxL: jax.Array
  target_BxL: jax.Array
  mask_BxL: jax.Array
  old_value_BxL: jax.Array

  def trim(self, length: int) -> CriticInputs:
    return jax.tree.map(lambda x: x[:, :length], self)


def _build(
  policy: ModelState, opt: OptimizerConfig, value_scale: float
) -> TrainState:
  model = ModelState.from_module(ValueModel(policy.merge(), value_scale))
  return TrainState(
    model=model,
    opt_state=make_optimizer(opt).init(model.params),
    step=jnp.zeros((), jnp.int32),
    rng=jax.random.key(0),  # unused: the critic samples nothing
  )


def _builder(config: CriticConfig):
  return functools.partial(
    _build, opt=config.optimizer, value_scale=config.value_scale
  )


def critic_layout(
  policy: ModelState,
  config: CriticConfig,
  mesh,
  rules: shd.Rules = shd.DEFAULT_TRAIN_RULES,
) -> tuple[TrainState, Layout]:
  """The critic's abstract state (shapes only, nothing allocated) and its
  layout: the target of a checkpoint restore."""
  abstract = jax.eval_shape(_builder(config), policy)
  return abstract, make_layout(abstract, mesh, rules)


def init_critic(
  policy: ModelState,
  config: CriticConfig,
  mesh,
  rules: shd.Rules = shd.DEFAULT_TRAIN_RULES,
) -> tuple[TrainState, Layout]:
  """A critic whose trunk copies `policy` (own buffers) and whose head is
  zero, with fresh optimizer moments, born sharded; and its layout."""
  _, layout = critic_layout(policy, config, mesh, rules)
  build = jax.jit(_builder(config), out_shardings=layout.state)
  return build(policy), layout


@jax.jit
def compute_values(critic: ModelState, tokens_BxL: jax.Array) -> jax.Array:
  """value_BxL of the critic on a batch (no gradient needed here)."""
  return critic.merge()(tokens_BxL)


def critic_loss_fn(
  model: nnx.Module, inputs: CriticInputs, clip: float
) -> tuple[jax.Array, step_lib.Metrics]:
  value_BxL = model(inputs.tokens_BxL)
  loss, metrics = losses.value_loss(
    value_BxL, inputs.old_value_BxL, inputs.target_BxL, inputs.mask_BxL, clip
  )
  weight = step_lib.agg_weight(inputs.mask_BxL, "token-mean")
  return loss, {**metrics, step_lib.LOSS_WEIGHT: weight}


def make_critic_step(config: CriticConfig, layout: Layout):
  """The jitted critic update: `(state, CriticInputs) -> (state, metrics)`.

  Keyed by what the update reads (the optimizer and the value clip), so
  runs that differ only in `warmup_steps` or `epochs` share one jitted step.
  """
  step_fn = functools.partial(
    critic_step, optimizer=config.optimizer, value_clip=config.value_clip
  )
  return step_lib.jit_step(step_fn, layout)


def critic_step(
  state: TrainState,
  inputs: CriticInputs,
  optimizer: OptimizerConfig,
  value_clip: float,
) -> tuple[TrainState, step_lib.Metrics]:
  """One critic update (pure; jit it with `make_critic_step`)."""
  loss_fn = functools.partial(critic_loss_fn, clip=value_clip)
  step_config = step_lib.StepConfig(optimizer=optimizer)
  return step_lib.update_step(state, inputs, loss_fn, step_config)


def explained_variance(
  value_BxL: jax.Array, target_BxL: jax.Array, mask_BxL: jax.Array
) -> float:
  """1 - Var(target - value) / Var(target) over the mask (1: perfect, 0:
  no better than the mean, < 0: worse); 0 when the targets are constant."""
  m = mask_BxL > 0
  target = jnp.asarray(target_BxL)[m]
  if target.size == 0:
    return 0.0
  var = float(jnp.var(target))
  if var <= 1e-12:
    return 0.0
  return 1.0 - float(jnp.var(target - jnp.asarray(value_BxL)[m])) / var
