"""The per-step advantage divisor (`rl.advantage_scale`): by hand, its scale
invariance, padding, the all-alike batch, and bad modes; the running
divisor (`rl.advantage_scale_decay`) by hand and against the per-step one."""

import json

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


def test_running_divisor_by_hand():
  # Decay 0.5, statistics 2, 4, (an all-alike step), 1.
  scale = E.RunningScale()
  d, scale = scale.step(2.0, 0.5)
  assert d == 2.0  # the first step: its own statistic, whatever the decay
  d, scale = scale.step(4.0, 0.5)
  np.testing.assert_allclose(d, (0.5 * 2 + 4) / 1.5)
  quiet, same = scale.step(1e-9, 0.5)
  assert quiet == 1.0 and same == scale  # divided by 1, state untouched
  assert scale.step(float("nan"), 0.5)[1] == scale
  d, scale = scale.step(1.0, 0.5)
  np.testing.assert_allclose(d, (0.25 * 2 + 0.5 * 4 + 1) / 1.75)
  # The state is a JSON-able dict (host state) and round-trips.
  back = E.RunningScale.from_state(json.loads(json.dumps(scale.state_dict())))
  assert back == scale


@settings(deadline=None, max_examples=25)
@given(seed=st.integers(0, 2**31 - 1), decay=st.floats(0.0, 0.99))
def test_running_divisor_is_per_step_at_decay_0_and_steady_under_a_constant(
  seed, decay
):
  rng = np.random.default_rng(seed)
  scale = E.RunningScale()
  for _ in range(6):
    adv_BxT = jnp.asarray(rng.normal(size=(3, 4)) * rng.random(), jnp.float32)
    if rng.random() < 0.3:
      adv_BxT = jnp.zeros((3, 4))  # an all-alike step
    mask_BxT = jnp.asarray(rng.random((3, 4)) < 0.7, jnp.float32)
    for mode in ("mean_abs", "std"):
      stat = float(E.batch_statistic(adv_BxT, mask_BxT, mode))
      d, _ = scale.step(stat, 0.0)
      assert np.float32(d) == E.batch_divisor(adv_BxT, mask_BxT, mode)
    # Carry a state forward: at decay 0 no history may leak into a step.
    _, scale = scale.step(stat, 0.0)
  # Bias correction: a constant statistic is the divisor from step 1 on.
  c = float(rng.uniform(0.01, 10.0))
  scale = E.RunningScale()
  for _ in range(5):
    d, scale = scale.step(c, decay)
    np.testing.assert_allclose(d, c, rtol=1e-12)


def test_decay_config_and_resume_errors():
  config = sokoban.get_config("gigpo,smoke")
  assert loop.advantage_scale_decay(config) == 0.0
  old = ml_collections.ConfigDict({"rl": {"steps": 2}})
  assert loop.advantage_scale_decay(old) == 0.0
  for bad in (-0.1, 1.0, float("nan"), "0.5"):
    with pytest.raises(ValueError, match="rl.advantage_scale_decay"):
      loop.advantage_scale_decay(
        ml_collections.ConfigDict({"rl": {"advantage_scale_decay": bad}})
      )
  # A run resumed past step 0 with a running divisor needs its state.
  config.rl.advantage_scale, config.rl.advantage_scale_decay = "mean_abs", 0.9
  with pytest.raises(ValueError, match="RL step 3 has none"):
    loop.check_scale_state(config, {"rl_step": 3})
  loop.check_scale_state(config, {"rl_step": 0})
  loop.check_scale_state(config, {"rl_step": 3, "adv_scale": {}})
  config.rl.advantage_scale_decay = 0.0  # per step: nothing to carry over
  loop.check_scale_state(config, {"rl_step": 3})
