"""GAE from a learned critic (`estimators.critic`): hand goldens at both
levels, masked turns, whitening, parity with plain returns, registry."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentic_rl import estimators as E
from agentic_rl.data import packing
from agentic_rl.types import Task, Trajectory, Turn


def _pack(*reward_lists, trained=None, batch_size=2):
  """One trajectory per reward list; every turn is obs [1, 2] + action
  [3, 4], so turn k covers positions 4k..4k+3 and acts at 4k+2, 4k+3."""
  trajs = []
  for i, rewards in enumerate(reward_lists):
    flags = (trained or {}).get(i, [True] * len(rewards))
    turns = [
      Turn(
        obs_tokens=[1, 2],
        action_tokens=[3, 4],
        action_logp=[-0.5, -0.5],
        reward=r,
        trained=f,
      )
      for r, f in zip(rewards, flags, strict=True)
    ]
    trajs.append(
      Trajectory(task=Task(id=f"t{i}", family="f"), group_id=0, turns=turns)
    )
  return packing.pack(trajs, batch_size=batch_size)


def _ramp(batch):
  b, l, _ = batch.shape
  return jnp.tile(0.1 * (jnp.arange(l, dtype=jnp.float32) + 1), (b, 1))


def test_turn_level_golden():
  batch = _pack([0.5, 1.0])
  v = _ramp(batch)  # V0 = v[2] = 0.3, V1 = v[6] = 0.7
  est = E.critic_gae(batch, v, level="turn", gamma=0.9, lam=0.8, whiten=False)
  # delta1 = 1 - 0.7 = 0.3 = A1; delta0 = 0.5 + 0.9 * 0.7 - 0.3 = 0.83,
  # A0 = 0.83 + 0.9 * 0.8 * 0.3 = 1.046; returns A + V: 1.346, 1.0.
  np.testing.assert_allclose(est.adv_BxT[0, :2], [1.046, 0.3], rtol=1e-5)
  want_adv = [0, 0, 1.046, 1.046, 0, 0, 0.3, 0.3]
  np.testing.assert_allclose(est.adv_BxL[0, :8], want_adv, rtol=1e-5)
  mask = np.zeros(8)
  mask[[2, 6]] = 1
  np.testing.assert_array_equal(est.value_mask_BxL[0, :8], mask)
  np.testing.assert_allclose(est.target_BxL[0, [2, 6]], [1.346, 1.0], 1e-5)
  assert float(jnp.abs(est.target_BxL[0]).sum()) == pytest.approx(2.346)
  # The padding row gets nothing.
  for x in est:
    assert not np.asarray(x[1]).any()


def test_token_level_golden():
  batch = _pack([0.5, 1.0])
  v = _ramp(batch)  # steps 2, 3, 6, 7 hold 0.3, 0.4, 0.7, 0.8
  est = E.critic_gae(batch, v, level="token", gamma=1.0, lam=1.0, whiten=False)
  # Rewards on each turn's last step (3, 7): A = return-to-go - V.
  want = [0, 0, 1.5 - 0.3, 1.5 - 0.4, 0, 0, 1.0 - 0.7, 1.0 - 0.8]
  np.testing.assert_allclose(est.adv_BxL[0, :8], want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(est.adv_BxT[0, :2], [1.15, 0.25], rtol=1e-5)
  np.testing.assert_allclose(
    est.target_BxL[0, :8], [0, 0, 1.5, 1.5, 0, 0, 1, 1], rtol=1e-6
  )
  np.testing.assert_array_equal(
    est.value_mask_BxL[0, :8], [0, 0, 1, 1, 0, 0, 1, 1]
  )
  # lam = 0: one-step TD errors, r_i + V_next - V_i, skipping observations.
  td = E.critic_gae(batch, v, level="token", gamma=1.0, lam=0.0, whiten=False)
  want = [0, 0, 0.4 - 0.3, 0.5 + 0.7 - 0.4, 0, 0, 0.8 - 0.7, 1.0 - 0.8]
  np.testing.assert_allclose(td.adv_BxL[0, :8], want, rtol=1e-5, atol=1e-6)


def test_untrained_turn_keeps_its_reward_but_trains_nothing():
  # Turn 1 was masked (e.g. a timeout): its tokens 4..7 carry no loss.
  batch = _pack([0.5, -0.2, 1.0], trained={0: [True, False, True]})
  v = jnp.zeros(batch.tokens_BxL.shape)
  turn = E.critic_gae(batch, v, level="turn", gamma=1.0, lam=1.0, whiten=False)
  np.testing.assert_allclose(turn.adv_BxT[0, :3], [1.3, 0.8, 1.0], rtol=1e-6)
  want = [0, 0, 1.3, 1.3, 0, 0, 0, 0, 0, 0, 1.0, 1.0]
  np.testing.assert_allclose(turn.adv_BxL[0, :12], want, rtol=1e-6)
  mask = np.zeros(12)
  mask[[2, 10]] = 1
  np.testing.assert_array_equal(turn.value_mask_BxL[0, :12], mask)
  tok = E.critic_gae(batch, v, level="token", gamma=1.0, lam=1.0, whiten=False)
  np.testing.assert_allclose(tok.adv_BxL[0, :12], want, rtol=1e-6)
  np.testing.assert_array_equal(
    tok.value_mask_BxL[0, :12], [0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1]
  )
  pos, trained = E.critic.decision_positions(
    batch.turn_id_BxL, batch.loss_mask_BxL, batch.shape[2]
  )
  np.testing.assert_array_equal(pos[0, :3], [2, 4, 10])
  np.testing.assert_array_equal(trained[0, :3], [True, False, True])


def test_zero_critic_gives_discounted_returns():
  batch = _pack([0.0, -0.1, 1.0], [0.3, 0.0], batch_size=3)
  v = jnp.zeros(batch.tokens_BxL.shape)
  est = E.critic_gae(batch, v, level="turn", gamma=0.9, lam=1.0, whiten=False)
  want = E.discounted_returns(
    batch.turn_reward_BxT, batch.turn_mask_BxT, gamma=0.9
  )
  np.testing.assert_allclose(est.adv_BxT, want, rtol=1e-6, atol=1e-7)


def test_whitening_and_jit():
  batch = _pack([0.0, -0.1, 1.0], [0.3, 0.0], [1.0], batch_size=4)
  v = _ramp(batch)
  for level in E.critic.LEVELS:
    est = E.critic_gae(batch, v, level=level, gamma=0.95, lam=0.9)
    if level == "turn":
      x, m = np.asarray(est.adv_BxT), np.asarray(batch.turn_mask_BxT) > 0
    else:
      x, m = np.asarray(est.adv_BxL), np.asarray(batch.loss_mask_BxL) > 0
    assert x[m].mean() == pytest.approx(0.0, abs=1e-6)
    assert x[m].std() == pytest.approx(1.0, abs=1e-4)
    assert not x[~m].any()
    fn = jax.jit(
      functools.partial(E.critic_gae, level=level, gamma=0.95, lam=0.9)
    )
    for got, want in zip(fn(batch, v), est, strict=True):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_registry_and_bad_input():
  batch = _pack([0.5, 1.0])
  v = _ramp(batch)
  assert E.uses_values("gae") and not E.uses_values("grpo")
  got = E.from_config({"name": "gae", "level": "token", "lam": 0.5})(batch, v)
  want = E.critic_gae(batch, v, level="token", lam=0.5)
  np.testing.assert_allclose(got.adv_BxL, want.adv_BxL)
  with pytest.raises(ValueError, match="level"):
    E.critic_gae(batch, v, level="episode")
  with pytest.raises(ValueError, match="gamma and lam"):
    E.critic_gae(batch, v, gamma=1.5)
  with pytest.raises(ValueError, match="value_BxL"):
    E.critic_gae(batch, v[:, :-1])
  with pytest.raises(KeyError, match="unknown estimator"):
    E.uses_values("ppo")
