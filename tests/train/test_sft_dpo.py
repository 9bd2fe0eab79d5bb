"""SFT and DPO through the shared update step."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentic_rl import losses
from agentic_rl.train import dpo, sft
from agentic_rl.train import state as st
from agentic_rl.train import step as sp
from tests.train.conftest import (
  STEP_CONFIG,
  fresh_state,
  make_batch,
  make_trajectories,
)

SFT_CONFIG = dataclasses.replace(
  STEP_CONFIG, loss=losses.PolicyLossConfig(agg="token-mean")
)


# Jitted so the model runs as one program, not op by op.
_sft_loss = jax.jit(lambda model, batch: sft.sft_loss_fn(model.merge(), batch))


def test_sft_loss_is_masked_nll():
  state = fresh_state()
  batch = make_batch(1, 4)
  loss, metrics = _sft_loss(state.model, batch)
  logp = np.asarray(sp.compute_logp(state.model, batch.tokens_BxL))
  mask = np.asarray(batch.loss_mask_BxL) > 0
  assert mask.sum() > 0 and (~mask).sum() > 0
  np.testing.assert_allclose(loss, -logp[mask].mean(), rtol=1e-5)
  assert float(metrics["tokens"]) == mask.sum()
  # Targets outside the mask do not matter: rewrite every unmasked token
  # after the last masked one (pure padding/trailing context).
  last = np.where(mask.any(0))[0].max()
  tokens = np.asarray(batch.tokens_BxL).copy()
  tokens[:, last + 1 :] = 7
  other = batch.replace(tokens_BxL=jnp.asarray(tokens))
  loss2, _ = _sft_loss(state.model, other)
  np.testing.assert_allclose(loss2, loss, rtol=1e-6)


def test_sft_steps_reduce_nll(rl_setup):
  step_fn = sft.make_sft_step(SFT_CONFIG, rl_setup.layout)
  batch = make_batch(2, 8)
  state, hist = sp.run_steps(step_fn, fresh_state(), [batch] * 8)
  assert int(state.step) == 8
  assert hist[-1]["loss"] < hist[1]["loss"] - 0.5
  assert {"grad_norm", "learning_rate", "perplexity"} <= set(hist[0])


def test_pack_pairs_common_shape():
  chosen = make_trajectories(3, 3)
  rejected = make_trajectories(4, 3)
  c, r = dpo.pack_pairs(chosen, rejected, batch_size=4, length_buckets=(32, 64))
  assert c.tokens_BxL.shape == r.tokens_BxL.shape == (4, 32)
  assert c.turn_reward_BxT.shape == r.turn_reward_BxT.shape
  with pytest.raises(dpo.PairError):
    dpo.pack_pairs(chosen, rejected[:2])


def test_dpo_at_reference_is_log2_and_learns(rl_setup):
  state = fresh_state()
  ref_model = st.copy_model(state.model)  # survives donation of state
  chosen, rejected = dpo.pack_pairs(
    make_trajectories(5, 6), make_trajectories(6, 6), batch_size=8,
    length_buckets=(32,),
  )  # fmt: skip
  pairs = dpo.make_pairs(ref_model, chosen, rejected)
  cfg = dpo.DpoConfig(beta=0.5)

  # Sequence log-probs sum the masked token log-probs.
  logp = sp.compute_logp(ref_model, chosen.tokens_BxL)
  want = np.sum(np.asarray(logp) * np.asarray(chosen.loss_mask_BxL), axis=1)
  np.testing.assert_allclose(pairs.ref_chosen_logp_B, want, rtol=1e-5)
  assert np.all(np.asarray(pairs.ref_chosen_logp_B)[6:] == 0.0)  # padding

  step_fn = dpo.make_dpo_step(STEP_CONFIG, cfg, rl_setup.layout)
  state, hist = sp.run_steps(step_fn, state, [pairs] * 6)
  # Golden: update 0 is evaluated at the reference itself, so every margin
  # is 0 and the loss is log 2 over the 6 real pairs (padding pairs out).
  assert hist[0]["loss"] == pytest.approx(math.log(2.0), rel=1e-6)
  assert hist[0]["reward_margin"] == pytest.approx(0.0, abs=1e-5)
  assert hist[-1]["loss"] < math.log(2.0) - 0.1
  assert hist[-1]["reward_margin"] > 0.0
  assert hist[-1]["reward_accuracy"] == 1.0


def test_dpo_sft_term_adds_the_chosen_nll(rl_setup):
  state = fresh_state()
  ref_model = st.copy_model(state.model)
  chosen, rejected = dpo.pack_pairs(
    make_trajectories(5, 4), make_trajectories(6, 4), length_buckets=(32,)
  )
  pairs = dpo.make_pairs(ref_model, chosen, rejected)
  logp = np.asarray(sp.compute_logp(ref_model, chosen.tokens_BxL))
  mask = np.asarray(chosen.loss_mask_BxL) > 0
  nll = -logp[mask].mean()
  loss, m = jax.jit(
    lambda model, p: dpo.dpo_loss_fn(
      model.merge(), p, dpo.DpoConfig(beta=0.5, sft_coef=2.0)
    )
  )(ref_model, pairs)
  np.testing.assert_allclose(m["chosen_nll_per_token"], nll, rtol=1e-5)
  np.testing.assert_allclose(loss, math.log(2.0) + 2.0 * nll, rtol=1e-5)


def test_dpo_config_and_shape_errors():
  with pytest.raises(losses.LossConfigError):
    dpo.DpoConfig(beta=0.0)
  with pytest.raises(losses.LossConfigError, match="sft_coef"):
    dpo.DpoConfig(sft_coef=-1.0)
  a = make_batch(0, 2, length=32)
  b = make_batch(0, 2, length=64)
  with pytest.raises(dpo.PairError):
    dpo.make_pairs(fresh_state().model, a, b)
