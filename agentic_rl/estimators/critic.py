"""Advantages from a learned critic: GAE at the turn or at the token level.

PPO with a value model (Schulman et al. 2017), the baseline every
critic-free estimator here is compared against. The critic's values come
aligned like log-probs (`value_BxL[b, i]` is V of the prefix before token
i, see `agentic_rl.models.value`); this module turns them and the batch's
per-turn rewards into advantages and value targets.

Where implementations disagree, the choice is the `level` option:

* "turn": one decision per turn (the multi-turn agent view; cf. ArCHer's
  utterance-level critic). A turn's value is read at its decision point,
  the first trained token of the turn (the state after its observation),
  GAE runs over turns with `gamma` and `lam` per turn, and every token of
  the turn gets the turn's advantage. The critic learns at decision points
  only.
* "token": one decision per policy token (verl's PPO). The turn's reward
  sits on its last step, GAE runs over trained tokens (observation tokens
  are skipped, neither discounting nor bootstrapping), and the critic
  learns on every trained token.

A turn with no trained token (a masked failure: timeout, context overflow)
is still a step, so its reward is not lost: its decision point is its
first token, and the critic is not trained there.

`whiten` normalizes the advantages over the batch's steps (zero mean, unit
variance), as PPO implementations do.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp

from agentic_rl.estimators import common
from agentic_rl.estimators.gae import gae
from agentic_rl.types import TrajectoryBatch, turns_to_tokens

Level = Literal["turn", "token"]
LEVELS = ("turn", "token")


class CriticEstimate(NamedTuple):
  """What the RL step and the critic step need from one batch.

  adv_BxL: per-token advantages (0 off trained tokens). adv_BxT: per-turn
  advantages for logging (turn level: the GAE ones; token level: the mean
  over the turn's steps). target_BxL: the critic's regression target (the
  GAE return) where `value_mask_BxL` is 1, else 0.
  """

  adv_BxL: jax.Array
  adv_BxT: jax.Array
  target_BxL: jax.Array
  value_mask_BxL: jax.Array


def _per_turn(
  op, x_BxL: jax.Array, turn_id_BxL: jax.Array, num_turns: int
) -> jax.Array:
  """`op` (a `jax.ops.segment_*`) of `x_BxL` over each row's turns: BxT.
  Padding tokens go to one extra segment, dropped."""
  b, _ = turn_id_BxL.shape
  ids_BxL = jnp.where(
    turn_id_BxL >= 0,
    jnp.arange(b)[:, None] * num_turns + turn_id_BxL,
    b * num_turns,
  )
  out = op(x_BxL.ravel(), ids_BxL.ravel(), num_segments=b * num_turns + 1)
  return out[:-1].reshape(b, num_turns)


def decision_positions(
  turn_id_BxL: jax.Array, loss_mask_BxL: jax.Array, num_turns: int
) -> tuple[jax.Array, jax.Array]:
  """(pos_BxT, trained_BxT): each turn's decision point and whether the
  turn has a trained token.

  The decision point is the turn's first trained token, or its first token
  when it has none; turns absent from a row get position 0 (callers mask
  them with `turn_mask_BxT`).
  """
  _, l = turn_id_BxL.shape
  i_BxL = jnp.broadcast_to(jnp.arange(l), turn_id_BxL.shape)
  untrained_BxL = (loss_mask_BxL <= 0).astype(jnp.int32)
  score_BxL = i_BxL + l * untrained_BxL  # trained tokens sort first
  best_BxT = _per_turn(jax.ops.segment_min, score_BxL, turn_id_BxL, num_turns)
  present_BxT = best_BxT < 2 * l
  trained_BxT = present_BxT & (best_BxT < l)
  pos_BxT = jnp.where(present_BxT, best_BxT % l, 0)
  return pos_BxT, trained_BxT


def _last_step_positions(
  step_BxL: jax.Array, turn_id_BxL: jax.Array, num_turns: int
) -> jax.Array:
  """The last position with `step_BxL` of each turn (-1 when none)."""
  _, l = turn_id_BxL.shape
  i_BxL = jnp.broadcast_to(jnp.arange(l), turn_id_BxL.shape)
  score_BxL = jnp.where(step_BxL, i_BxL, -1)
  return _per_turn(jax.ops.segment_max, score_BxL, turn_id_BxL, num_turns)


def _whiten(x: jax.Array, mask: jax.Array, eps: float = 1e-6) -> jax.Array:
  n = jnp.maximum(mask.sum(), 1.0)
  mean = (x * mask).sum() / n
  var = (jnp.square(x - mean) * mask).sum() / n
  return (x - mean) * jax.lax.rsqrt(var + eps) * mask


def critic_gae(
  batch: TrajectoryBatch,
  value_BxL: jax.Array,
  *,
  level: Level = "turn",
  gamma: float = 1.0,
  lam: float = 0.95,
  whiten: bool = True,
) -> CriticEstimate:
  """GAE(gamma, lam) advantages and value targets from the critic's values.

  See the module docstring for the two levels. Pure and jittable.
  """
  if level not in LEVELS:
    raise ValueError(f"critic level {level!r}: expected one of {LEVELS}")
  if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
    raise ValueError(f"gamma and lam must be in [0, 1]: {gamma}, {lam}")
  b, l, t = batch.shape
  if value_BxL.shape != (b, l):
    raise ValueError(f"value_BxL {value_BxL.shape} != tokens {(b, l)}")
  value_BxL = jnp.asarray(value_BxL, jnp.float32)
  turn_mask_BxT = batch.turn_mask_BxT
  # `where`, not a product: an inf reward on a masked turn would be NaN, and
  # the token-level einsum below would spread it over the whole row.
  reward_BxT = common.apply_mask(batch.turn_reward_BxT, turn_mask_BxT)
  pos_BxT, trained_BxT = decision_positions(
    batch.turn_id_BxL, batch.loss_mask_BxL, t
  )
  rows_Bx1 = jnp.arange(b)[:, None]
  trained_BxL = batch.loss_mask_BxL > 0
  if level == "turn":
    value_BxT = value_BxL[rows_Bx1, pos_BxT] * turn_mask_BxT
    adv_BxT, ret_BxT = gae(
      reward_BxT, value_BxT, turn_mask_BxT, gamma=gamma, lam=lam
    )
    learn_BxT = turn_mask_BxT * trained_BxT
    if whiten:
      adv_BxT = _whiten(adv_BxT, turn_mask_BxT)
    adv_BxL = turns_to_tokens(adv_BxT, batch.turn_id_BxL) * batch.loss_mask_BxL
    # The critic learns at the decision points of trained turns.
    hit_BxTxL = (pos_BxT[..., None] == jnp.arange(l)) & (
      learn_BxT[..., None] > 0
    )
    value_mask_BxL = hit_BxTxL.any(axis=1).astype(jnp.float32)
    target_BxL = jnp.einsum(
      "btl,bt->bl", hit_BxTxL.astype(jnp.float32), ret_BxT
    )
    return CriticEstimate(adv_BxL, adv_BxT, target_BxL, value_mask_BxL)

  # Token level: steps are the trained tokens, plus the decision point of
  # each real turn without one (so its reward still enters).
  i_L = jnp.arange(l)
  untrained_turn_BxT = (turn_mask_BxT > 0) & ~trained_BxT
  extra_BxL = ((pos_BxT[..., None] == i_L) & untrained_turn_BxT[..., None]).any(
    axis=1
  )
  step_BxL = trained_BxL | extra_BxL
  last_BxT = _last_step_positions(step_BxL, batch.turn_id_BxL, t)
  put_BxTxL = (last_BxT[..., None] == i_L) & (turn_mask_BxT[..., None] > 0)
  reward_BxL = jnp.einsum(
    "btl,bt->bl", put_BxTxL.astype(jnp.float32), reward_BxT
  )
  step_f = step_BxL.astype(jnp.float32)
  adv_BxL, ret_BxL = gae(
    reward_BxL, value_BxL * step_f, step_f, gamma=gamma, lam=lam
  )
  if whiten:
    adv_BxL = _whiten(adv_BxL, step_f)
  adv_BxL = adv_BxL * batch.loss_mask_BxL
  value_mask_BxL = trained_BxL.astype(jnp.float32)
  target_BxL = ret_BxL * value_mask_BxL
  adv_BxT = _turn_mean(adv_BxL, batch.loss_mask_BxL, batch.turn_id_BxL, t)
  return CriticEstimate(adv_BxL, adv_BxT, target_BxL, value_mask_BxL)


def _turn_mean(
  x_BxL: jax.Array, mask_BxL: jax.Array, turn_id_BxL: jax.Array, num_turns: int
) -> jax.Array:
  total_BxT = _per_turn(
    jax.ops.segment_sum, x_BxL * mask_BxL, turn_id_BxL, num_turns
  )
  count_BxT = _per_turn(jax.ops.segment_sum, mask_BxL, turn_id_BxL, num_turns)
  return total_BxT / jnp.maximum(count_BxT, 1.0)
