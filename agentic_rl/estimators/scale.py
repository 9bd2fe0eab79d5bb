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

One step's statistic moves a lot: on Sokoban a step whose groups are
nearly all alike has a few small advantages, and dividing by their own
mean multiplied them up to 15x (experiments/sokoban_budget). With
`rl.advantage_scale_decay` d > 0 the divisor is instead a running mean of
the steps' statistics, weighted d^k for the statistic k steps back and
bias-corrected as Adam's moments are (`RunningScale`): the first step is
divided by its own statistic, later steps by the average of the recent
ones, so a quiet step keeps the scale of its neighbours. d = 0 is the
per-step divisor. Steps whose statistic is at most `eps` are divided by
1 and leave the running mean alone. The running mean is host state,
checkpointed with the run.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

SCALES = ("none", "mean_abs", "std")


def check_scale(mode: str, what: str = "rl.advantage_scale") -> str:
  """`mode` if it names a scale; a ValueError naming `what` otherwise."""
  if mode not in SCALES:
    raise ValueError(f"{what} {mode!r}: expected one of {SCALES}")
  return mode


def check_decay(decay: float, what: str = "rl.advantage_scale_decay") -> float:
  """`decay` if it is in [0, 1); a ValueError naming `what` otherwise."""
  if not (isinstance(decay, (int, float)) and 0.0 <= decay < 1.0):
    raise ValueError(f"{what} {decay!r}: expected a number in [0, 1)")
  return float(decay)


def batch_statistic(
  adv_BxT: jax.Array, turn_mask_BxT: jax.Array, mode: str
) -> jax.Array:
  """The batch's scale under `mode` ("mean_abs" or "std") over its real
  turns; padded turns (mask <= 0) enter it whatever their value. 0 for a
  batch without real turns."""
  if check_scale(mode) == "none":
    raise ValueError("batch_statistic: mode 'none' has no statistic")
  real_BxT = turn_mask_BxT > 0
  n = jnp.maximum(real_BxT.sum(), 1)
  adv_BxT = jnp.where(real_BxT, adv_BxT.astype(jnp.float32), 0.0)
  if mode == "mean_abs":
    return jnp.abs(adv_BxT).sum() / n
  mean = adv_BxT.sum() / n
  dev_BxT = jnp.where(real_BxT, adv_BxT - mean, 0.0)
  return jnp.sqrt((dev_BxT * dev_BxT).sum() / n)


def batch_divisor(
  adv_BxT: jax.Array,
  turn_mask_BxT: jax.Array,
  mode: str,
  eps: float = 1e-6,
) -> jax.Array:
  """The scalar one step's advantages are divided by on their own (decay
  0; see the module doc)."""
  if check_scale(mode) == "none":
    return jnp.ones((), jnp.float32)
  stat = batch_statistic(adv_BxT, turn_mask_BxT, mode)
  return jnp.where(stat > eps, stat, 1.0)


@dataclasses.dataclass(frozen=True)
class RunningScale:
  """Bias-corrected running mean of the steps' statistics (host state).

  After statistics s_1..s_n (oldest first) under decay d,
  `total` = (1 - d) * sum_k d^(n-k) s_k and `weight` = 1 - d^n (the same sum
  over ones), so `divisor()` = total / weight weighs the steps d^(n-k) and
  is s_1 after one step, whatever d. With d = 0 it is the last statistic.
  """

  total: float = 0.0
  weight: float = 0.0

  def divisor(self) -> float:
    """The running mean; 1 before any step has had a statistic."""
    return self.total / self.weight if self.weight > 0 else 1.0

  def step(
    self, stat: float, decay: float, eps: float = 1e-6
  ) -> tuple[float, RunningScale]:
    """(the divisor of a step whose statistic is `stat`, the state after
    it). A statistic at most `eps` (an all-alike batch, advantages ~0) or
    not finite leaves the state alone and divides by 1, as
    `batch_divisor` does."""
    if not (math.isfinite(stat) and stat > eps):
      return 1.0, self
    new = RunningScale(
      decay * self.total + (1.0 - decay) * stat,
      decay * self.weight + (1.0 - decay),
    )
    return new.divisor(), new

  def state_dict(self) -> dict[str, float]:
    return dataclasses.asdict(self)

  @classmethod
  def from_state(cls, state: dict[str, Any] | None) -> RunningScale:
    """The state `state_dict` gave; a fresh one for None (no step yet)."""
    if state is None:
      return cls()
    return cls(float(state["total"]), float(state["weight"]))
