"""Estimators by name, so configs and notebooks select them.

A registered estimator is `fn(batch: TrajectoryBatch, **hparams) -> adv_BxT`.
An estimator registered with `uses_values=True` also takes the critic's
`value_BxL` (see `agentic_rl.models.value`) and returns a
`critic.CriticEstimate` (token advantages and value targets); the training
loop runs a critic for it. Register a new one in a notebook with

  @estimators.register("my_estimator")
  def my_estimator(batch, *, scale=1.0):
    return scale * batch.turn_reward_BxT * batch.turn_mask_BxT

`from_config` tries the configured estimator on a four-row batch
(`probe_batch`) before handing it over, so a misspelt hparam, a bad mode
or a NaN discount is an `EstimatorConfigError` when the config is read,
not at the first RL step after the cold start.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from agentic_rl.estimators import common, critic, outcome, turn
from agentic_rl.types import TrajectoryBatch

Estimator = Callable[..., jax.Array]
_REGISTRY: dict[str, Estimator] = {}
_USES_VALUES: set[str] = set()


def register(name: str, *, overwrite: bool = False, uses_values: bool = False):
  """Decorator adding `fn(batch, **hparams) -> adv_BxT` under `name`.

  `uses_values`: `fn(batch, value_BxL, **hparams) -> CriticEstimate`.
  """

  def wrap(fn: Estimator) -> Estimator:
    if name in _REGISTRY and not overwrite:
      raise ValueError(
        f"estimator {name!r} is already registered; pass "
        "overwrite=True to replace it"
      )
    _REGISTRY[name] = fn
    _USES_VALUES.discard(name)
    if uses_values:
      _USES_VALUES.add(name)
    return fn

  return wrap


def get(name: str) -> Estimator:
  if name not in _REGISTRY:
    raise KeyError(
      f"unknown estimator {name!r}; registered: {sorted(_REGISTRY)}"
    )
  return _REGISTRY[name]


def uses_values(name: str) -> bool:
  """Whether the estimator `name` needs a critic's values."""
  get(name)
  return name in _USES_VALUES


def names() -> list[str]:
  return sorted(_REGISTRY)


class EstimatorConfigError(ValueError):
  """An estimator config the estimator refuses, or that makes it non-finite."""


def from_config(config: Any) -> Callable[[TrajectoryBatch], jax.Array]:
  """`config.name` picks the estimator; every other field is a hparam.

  Works with an ml_collections ConfigDict or a plain dict. The estimator is
  tried once on `probe_batch()` (see `check_estimator`).
  """
  cfg = dict(config.to_dict() if hasattr(config, "to_dict") else config)
  if "name" not in cfg:
    raise ValueError(
      f"estimator config needs a 'name' field; registered: {sorted(_REGISTRY)}"
    )
  name = cfg.pop("name")
  estimator = functools.partial(get(name), **cfg)
  check_estimator(name, estimator, cfg)
  return estimator


def probe_batch() -> TrajectoryBatch:
  """Four rows in two groups of two, two turns of three tokens (an
  observation token, two action tokens); the last row ended after one turn.
  Every field an estimator may read is set, with finite values."""
  turn_id_BxL = np.array(
    [[0, 0, 0, 1, 1, 1]] * 3 + [[0, 0, 0, -1, -1, -1]], np.int32
  )
  turn_mask_BxT = np.array([[1, 1], [1, 1], [1, 1], [1, 0]], np.float32)
  return TrajectoryBatch(
    tokens_BxL=jnp.zeros(turn_id_BxL.shape, jnp.int32),
    loss_mask_BxL=jnp.asarray(
      (turn_id_BxL >= 0) & (np.arange(6) % 3 != 0), jnp.float32
    ),
    turn_id_BxL=jnp.asarray(turn_id_BxL),
    behaviour_logp_BxL=jnp.full(turn_id_BxL.shape, -1.0, jnp.float32),
    turn_reward_BxT=jnp.asarray(
      [[0.0, 1.0], [0.0, -0.5], [0.5, 0.0], [1.0, 0.0]], jnp.float32
    ),
    turn_mask_BxT=jnp.asarray(turn_mask_BxT),
    # Each group's first turns share a state; the rest are their own.
    anchor_id_BxT=jnp.asarray([[0, 1], [0, 2], [3, 4], [3, 5]], jnp.int32),
    process_score_BxT=jnp.asarray(0.5 * turn_mask_BxT),
    group_id_B=jnp.asarray([0, 0, 1, 1], jnp.int32),
    outcome_B=jnp.asarray([1.0, 0.0, 0.0, 1.0], jnp.float32),
  )


def check_estimator(
  name: str, estimator: Callable[..., Any], hparams: dict[str, Any]
) -> None:
  """Runs `estimator` (with its hparams bound) on `probe_batch()`; raises
  `EstimatorConfigError` naming the estimator and its hparams if it refuses
  them (an unknown keyword, a bad choice, an out-of-range number) or returns
  anything non-finite. An estimator that uses values gets a zero critic."""
  batch = probe_batch()
  args = (batch,)
  if name in _USES_VALUES:
    args = (batch, jnp.zeros(batch.tokens_BxL.shape, jnp.float32))
  what = f"estimator {name!r} with hparams {hparams}"
  try:
    out = estimator(*args)
  except (TypeError, ValueError) as e:
    raise EstimatorConfigError(f"{what}: {e}") from e
  if not all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(out)):
    raise EstimatorConfigError(
      f"{what}: non-finite advantages on a finite four-row probe batch"
    )


def _per_turn(adv_B: jax.Array, batch: TrajectoryBatch) -> jax.Array:
  return adv_B[:, None] * batch.turn_mask_BxT


def _traj_mask(batch: TrajectoryBatch) -> jax.Array:
  return (batch.turn_mask_BxT.sum(axis=1) > 0).astype("float32")


SCORES = ("outcome", "return")


def _score_B(batch: TrajectoryBatch, score: str) -> jax.Array:
  """What an episode-level estimator ranks the group by.

  "outcome": the reward stack's verdict (`Trajectory.outcome`, e.g. solved
  or not). "return": the sum of the episode's per-turn rewards, the signal
  the per-turn estimators see (shaping and failure penalties included), so
  an ablation can give GRPO the turn-level estimators' reward without their
  per-turn credit.
  """
  if score == "outcome":
    return batch.outcome_B
  if score == "return":
    return common.apply_mask(batch.turn_reward_BxT, batch.turn_mask_BxT).sum(
      axis=1
    )
  raise ValueError(f"estimator score {score!r}: expected one of {SCORES}")


@register("grpo")
def _grpo(
  batch, *, normalize_std=True, eps=1e-6, singleton="raw", score="outcome"
):
  adv_B = outcome.grpo(
    _score_B(batch, score),
    batch.group_id_B,
    normalize_std=normalize_std,
    eps=eps,
    singleton=singleton,
    traj_mask_B=_traj_mask(batch),
  )
  return _per_turn(adv_B, batch)


@register("dr_grpo")
def _dr_grpo(batch, *, eps=1e-6, singleton="raw", score="outcome"):
  return _grpo(
    batch, normalize_std=False, eps=eps, singleton=singleton, score=score
  )


@register("rloo")
def _rloo(batch, *, singleton="zero", score="outcome"):
  adv_B = outcome.rloo(
    _score_B(batch, score),
    batch.group_id_B,
    singleton=singleton,
    traj_mask_B=_traj_mask(batch),
  )
  return _per_turn(adv_B, batch)


@register("reinforce_pp")
def _reinforce_pp(batch, *, eps=1e-6, score="outcome"):
  adv_B = outcome.reinforce_pp_baseline(
    _score_B(batch, score),
    batch.group_id_B,
    eps=eps,
    traj_mask_B=_traj_mask(batch),
  )
  return _per_turn(adv_B, batch)


@register("raft")
def _raft(batch, *, keep="success", threshold=1.0, score="outcome"):
  adv_B = outcome.raft(
    _score_B(batch, score),
    batch.group_id_B,
    keep=keep,
    threshold=threshold,
    traj_mask_B=_traj_mask(batch),
  )
  return _per_turn(adv_B, batch)


@register("gigpo")
def _gigpo(batch, **hparams):
  return turn.gigpo(
    batch.turn_reward_BxT,
    batch.turn_mask_BxT,
    batch.group_id_B,
    batch.anchor_id_BxT,
    **hparams,
  )


@register("turn_discounted")
def _turn_discounted(batch, **hparams):
  return turn.turn_discounted(
    batch.turn_reward_BxT, batch.turn_mask_BxT, batch.group_id_B, **hparams
  )


@register("prm_weighted")
def _prm_weighted(batch, **hparams):
  return turn.prm_weighted(
    batch.outcome_B,
    batch.group_id_B,
    batch.process_score_BxT,
    batch.turn_mask_BxT,
    **hparams,
  )


@register("gae", uses_values=True)
def _gae(batch, value_BxL, *, level="turn", gamma=1.0, lam=0.95, whiten=True):
  return critic.critic_gae(
    batch, value_BxL, level=level, gamma=gamma, lam=lam, whiten=whiten
  )
