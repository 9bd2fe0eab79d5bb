"""Generalized advantage estimation for critic-based PPO."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from agentic_rl.estimators import common


def gae(
  reward_BxL: jax.Array,
  value_BxL: jax.Array,
  mask_BxL: jax.Array,
  *,
  gamma: float,
  lam: float,
) -> tuple[jax.Array, jax.Array]:
  """GAE(gamma, lambda) (Schulman et al. 2016) over policy tokens only.

  delta_i = r_i + gamma * V_next - V_i and A_i = delta_i + gamma * lam *
  A_next, where "next" is the next position with mask 1: observation tokens
  (mask 0) are skipped, not treated as steps, so the environment's tokens
  neither discount nor bootstrap. The value after the last policy token is
  0. Returns (adv_BxL, ret_BxL = adv + V), both 0 where mask is 0.
  """
  common.check_array("reward_BxL", reward_BxL, (None, None), "float")
  shape = reward_BxL.shape
  common.check_array("value_BxL", value_BxL, shape, "float")
  common.check_array("mask_BxL", mask_BxL, shape, "float")
  common.check_number("gamma", gamma, 0.0, 1.0)
  common.check_number("lam", lam, 0.0, 1.0)
  return _gae(reward_BxL, value_BxL, mask_BxL, gamma, lam)


@functools.partial(jax.jit, static_argnums=(3, 4))
def _gae(reward_BxL, value_BxL, mask_BxL, gamma, lam):
  r_LxB = jnp.asarray(reward_BxL, jnp.float32).T
  v_LxB = jnp.asarray(value_BxL, jnp.float32).T
  m_LxB = jnp.asarray(mask_BxL, jnp.float32).T > 0

  def back(carry, x):
    next_value_B, next_adv_B = carry
    r_B, v_B, m_B = x
    delta_B = r_B + gamma * next_value_B - v_B
    adv_B = delta_B + gamma * lam * next_adv_B
    carry = (
      jnp.where(m_B, v_B, next_value_B),
      jnp.where(m_B, adv_B, next_adv_B),
    )
    return carry, jnp.where(m_B, adv_B, 0.0)

  zeros_B = jnp.zeros_like(r_LxB[0])
  _, adv_LxB = jax.lax.scan(
    back, (zeros_B, zeros_B), (r_LxB, v_LxB, m_LxB), reverse=True
  )
  adv_BxL = adv_LxB.T
  ret_BxL = jnp.where(mask_BxL > 0, adv_BxL + value_BxL, 0.0)
  return adv_BxL, ret_BxL
