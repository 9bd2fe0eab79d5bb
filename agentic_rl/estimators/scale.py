"""One divisor per RL step for the whole batch's advantages.

Estimators give advantages of different size: on Sokoban, GiGPO's (an
episode term plus a step term, each normalized within small groups) run
about 7x GRPO's. Adam ignores the scale of the loss as a whole, so what an
advantage's scale changes is the weight of the loss's other terms: under
one `loss.kl_coef` the estimator with the smaller advantages is held
harder to its reference policy (experiments/sokoban_budget,
`grpo_long_kl_matched`). Dividing each step's advantages by one batch
statistic puts every estimator on the same scale, so one KL and entropy
coefficient means the same anchor for all of them.

Modes (`rl.advantage_scale`):
  "none"      advantages as the estimator gave them (divisor 1);
  "mean_abs"  divide by their mean absolute value over the batch's real
              turns (so the step's mean |advantage| becomes 1);
  "std"       divide by their standard deviation over the real turns
              (population std about the batch mean; the values are not
              re-centered, so a group-relative advantage keeps its sign).

Statistics are over turns (each real decision counts once, as in the
loop's `adv_*` metrics), not tokens. A batch whose statistic is at most
`eps` (every group alike, so every advantage 0) keeps divisor 1: nothing
is amplified out of rounding noise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

SCALES = ("none", "mean_abs", "std")


def check_scale(mode: str, what: str = "rl.advantage_scale") -> str:
  """`mode` if it names a scale; a ValueError naming `what` otherwise."""
  if mode not in SCALES:
    raise ValueError(f"{what} {mode!r}: expected one of {SCALES}")
  return mode


def batch_divisor(
  adv_BxT: jax.Array,
  turn_mask_BxT: jax.Array,
  mode: str,
  eps: float = 1e-6,
) -> jax.Array:
  """The scalar the step's advantages are divided by (see the module doc);
  padded turns (mask <= 0) enter no statistic, whatever their value."""
  check_scale(mode)
  if mode == "none":
    return jnp.ones((), jnp.float32)
  real_BxT = turn_mask_BxT > 0
  n = jnp.maximum(real_BxT.sum(), 1)
  adv_BxT = jnp.where(real_BxT, adv_BxT.astype(jnp.float32), 0.0)
  if mode == "mean_abs":
    stat = jnp.abs(adv_BxT).sum() / n
  else:
    mean = adv_BxT.sum() / n
    dev_BxT = jnp.where(real_BxT, adv_BxT - mean, 0.0)
    stat = jnp.sqrt((dev_BxT * dev_BxT).sum() / n)
  return jnp.where(stat > eps, stat, 1.0)
