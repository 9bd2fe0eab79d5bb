"""The per-step advantage divisor (`rl.advantage_scale`): by hand, its scale
invariance, padding, the all-alike batch, and bad modes."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_rl import estimators as E
from agentic_rl.train import loop
from configs import sokoban

# Real turns 1, -2, 3; the padded slots hold junk (NaN, inf, 100) that must
# enter no statistic.
ADV_BxT = jnp.array([[1.0, -2.0, jnp.nan], [3.0, jnp.inf, 100.0]])
MASK_BxT = jnp.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_divisor_by_hand():
  # mean |a| = (1 + 2 + 3) / 3 = 2.
  np.testing.assert_allclose(E.batch_divisor(ADV_BxT, MASK_BxT, "mean_abs"), 2)
  # mean 2/3; deviations 1/3, -8/3, 7/3; population variance
  # (1 + 64 + 49) / 9 / 3 = 114 / 27.
  np.testing.assert_allclose(
    E.batch_divisor(ADV_BxT, MASK_BxT, "std"), np.sqrt(114 / 27), rtol=1e-6
  )
  assert float(E.batch_divisor(ADV_BxT, MASK_BxT, "none")) == 1.0


@pytest.mark.parametrize("mode", ["mean_abs", "std"])
def test_an_all_alike_batch_keeps_divisor_one(mode):
  # Every group alike: group-relative advantages are all 0 (or rounding
  # noise), and nothing is amplified.
  zeros = jnp.zeros((2, 3))
  assert float(E.batch_divisor(zeros, MASK_BxT, mode)) == 1.0
  noise = jnp.full((2, 3), 1e-9)
  assert float(E.batch_divisor(noise, MASK_BxT, mode)) == 1.0
  assert float(E.batch_divisor(ADV_BxT, jnp.zeros((2, 3)), mode)) == 1.0


@settings(deadline=None, max_examples=25)
@given(
  seed=st.integers(0, 2**31 - 1),
  c=st.floats(0.01, 100.0),
  mode=st.sampled_from(["mean_abs", "std"]),
)
def test_rescaled_advantages_do_not_depend_on_the_estimators_scale(
  seed, c, mode
):
  rng = np.random.default_rng(seed)
  adv_BxT = jnp.asarray(rng.normal(size=(4, 5)), jnp.float32)
  mask_BxT = jnp.asarray(rng.random((4, 5)) < 0.7, jnp.float32)
  mask_BxT = mask_BxT.at[0, 0].set(1.0)  # at least one real turn
  d1 = E.batch_divisor(adv_BxT, mask_BxT, mode)
  d2 = E.batch_divisor(c * adv_BxT, mask_BxT, mode)
  np.testing.assert_allclose(d2, c * d1, rtol=1e-5)
  np.testing.assert_allclose(
    (c * adv_BxT) / d2 * mask_BxT, adv_BxT / d1 * mask_BxT, atol=1e-5
  )
  if mode == "mean_abs":  # the step's mean |advantage| becomes 1
    real = np.asarray(mask_BxT) > 0
    np.testing.assert_allclose(
      np.abs(np.asarray(adv_BxT / d1))[real].mean(), 1.0, rtol=1e-5
    )


def test_divisor_jits_to_the_same_value():
  fn = jax.jit(E.batch_divisor, static_argnames="mode")
  for mode in E.SCALES:
    np.testing.assert_allclose(
      fn(ADV_BxT, MASK_BxT, mode=mode),
      E.batch_divisor(ADV_BxT, MASK_BxT, mode),
      rtol=1e-6,
    )


def test_bad_modes_are_named_errors():
  with pytest.raises(ValueError, match=r"rl.advantage_scale 'meanabs'"):
    E.batch_divisor(ADV_BxT, MASK_BxT, "meanabs")
  config = sokoban.get_config("gigpo,smoke")
  assert loop.advantage_scale(config) == "none"
  config.rl.advantage_scale = "std"
  assert loop.advantage_scale(config) == "std"
  config.rl.advantage_scale = "batch"
  with pytest.raises(ValueError, match=r"expected one of \('none'"):
    loop.advantage_scale(config)
  # A config.json written before the option reads as "none".
  old = ml_collections.ConfigDict({"rl": {"steps": 2}})
  assert loop.advantage_scale(old) == "none"
