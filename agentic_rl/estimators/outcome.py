"""Outcome-level estimators: one scalar advantage per trajectory.

All take `outcome_B` and dense `group_id_B` (ids below B) and return `adv_B`.
`traj_mask_B` (optional) marks real trajectories; padding rows get 0 and
never enter any statistic.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from agentic_rl.estimators import common


def _check(outcome_B, group_id_B, traj_mask_B):
  common.check_array("outcome_B", outcome_B, (None,), "float")
  b = outcome_B.shape[0]
  common.check_array("group_id_B", group_id_B, (b,), "int")
  common.check_ids("group_id_B", group_id_B, b)
  if traj_mask_B is not None:
    common.check_array("traj_mask_B", traj_mask_B, (b,), "float")


def _mask(outcome_B, traj_mask_B):
  if traj_mask_B is None:
    return jnp.ones(outcome_B.shape, jnp.float32)
  return jnp.asarray(traj_mask_B, jnp.float32)


def grpo(
  outcome_B: jax.Array,
  group_id_B: jax.Array,
  *,
  normalize_std: bool = True,
  eps: float = 1e-6,
  singleton: str = "raw",
  traj_mask_B: jax.Array | None = None,
) -> jax.Array:
  """Group-relative advantage (Shao et al. 2024, DeepSeekMath, GRPO).

  A_i = (r_i - mean_g r) / (std_g r + eps), std unbiased (ddof=1) as in
  verl. `normalize_std=False` drops the division: Dr.GRPO (Liu et al. 2025,
  "Understanding R1-Zero-Like Training"), whose bias argument is that the
  std rescales easy and hard prompts unequally. See `common.normalize` for
  `singleton`.
  """
  _check(outcome_B, group_id_B, traj_mask_B)
  common.check_choice("singleton", singleton, common.SINGLETON_MODES)
  common.check_number("eps", eps, 0.0)
  return _grpo(
    outcome_B, group_id_B, traj_mask_B, normalize_std, eps, singleton
  )


@functools.partial(jax.jit, static_argnums=(3, 4, 5))
def _grpo(outcome_B, group_id_B, traj_mask_B, normalize_std, eps, singleton):
  mask_B = _mask(outcome_B, traj_mask_B)
  r_B = jnp.asarray(outcome_B, jnp.float32)
  stats = common.SegmentStats(r_B, group_id_B, mask_B, r_B.shape[0])
  adv_B = common.normalize(
    r_B, stats, normalize_std=normalize_std, eps=eps, singleton=singleton
  )
  return common.apply_mask(adv_B, mask_B)


def rloo(
  outcome_B: jax.Array,
  group_id_B: jax.Array,
  *,
  singleton: str = "zero",
  traj_mask_B: jax.Array | None = None,
) -> jax.Array:
  """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024).

  A_i = r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean_g r). A lone sample
  has no leave-one-out baseline: `singleton="zero"` gives it 0 (default),
  `"raw"` its reward.
  """
  _check(outcome_B, group_id_B, traj_mask_B)
  common.check_choice("singleton", singleton, common.SINGLETON_MODES)
  return _rloo(outcome_B, group_id_B, traj_mask_B, singleton)


@functools.partial(jax.jit, static_argnums=(3,))
def _rloo(outcome_B, group_id_B, traj_mask_B, singleton):
  mask_B = _mask(outcome_B, traj_mask_B)
  r_B = jnp.asarray(outcome_B, jnp.float32)
  stats = common.SegmentStats(r_B, group_id_B, mask_B, r_B.shape[0])
  g_B = stats.count_N
  lone_B = g_B <= 1.0
  adv_B = g_B / jnp.maximum(g_B - 1.0, 1.0) * (r_B - stats.mean_N)
  adv_B = jnp.where(lone_B, r_B if singleton == "raw" else 0.0, adv_B)
  return common.apply_mask(adv_B, mask_B)


def reinforce_pp_baseline(
  outcome_B: jax.Array,
  group_id_B: jax.Array,
  *,
  eps: float = 1e-6,
  traj_mask_B: jax.Array | None = None,
) -> jax.Array:
  """REINFORCE++ with a group baseline (Hu 2025, "REINFORCE++").

  Subtracts the group mean (a lone sample keeps its reward, as in verl),
  then whitens over the whole batch: (x - mean_batch) / (std_batch + eps).
  verl whitens over response tokens; here each trajectory counts once, so
  long trajectories do not dominate the batch statistics.
  """
  _check(outcome_B, group_id_B, traj_mask_B)
  common.check_number("eps", eps, 0.0)
  return _reinforce_pp(outcome_B, group_id_B, traj_mask_B, eps)


@functools.partial(jax.jit, static_argnums=(3,))
def _reinforce_pp(outcome_B, group_id_B, traj_mask_B, eps):
  mask_B = _mask(outcome_B, traj_mask_B)
  r_B = jnp.asarray(outcome_B, jnp.float32)
  stats = common.SegmentStats(r_B, group_id_B, mask_B, r_B.shape[0])
  x_B = common.normalize(
    r_B, stats, normalize_std=False, eps=eps, singleton="raw"
  )
  batch = common.SegmentStats(x_B, jnp.zeros_like(group_id_B), mask_B, 1)
  return common.apply_mask((x_B - batch.mean_N) / (batch.std_N + eps), mask_B)


RAFT_KEEP = ("success", "best")


def raft(
  score_B: jax.Array,
  group_id_B: jax.Array,
  *,
  keep: str = "success",
  threshold: float = 1.0,
  traj_mask_B: jax.Array | None = None,
) -> jax.Array:
  """Online rejection-sampling fine-tuning: 1 for a kept trajectory, else 0.

  RAFT (Dong et al. 2023, "Reward rAnked FineTuning") and expert iteration
  / ReST-EM: the policy samples, a filter keeps the good samples, and the
  policy fits them. As advantages, the policy-gradient step on the first
  epoch is exactly the NLL gradient of the kept samples, and the rest get
  no signal at all (no baseline, nothing pushed down). `keep="success"`
  keeps `score >= threshold` (a verified success with the 0/1 outcome);
  `keep="best"` keeps each group's top score (ties all kept; RAFT's best of
  K). How the kept tokens are normalized is the loss's aggregation mode:
  over every sampled sequence or token, not only the kept ones, so steps
  with fewer successes take smaller steps.
  """
  _check(score_B, group_id_B, traj_mask_B)
  common.check_choice("keep", keep, RAFT_KEEP)
  common.check_number("threshold", threshold)
  return _raft(score_B, group_id_B, traj_mask_B, keep, threshold)


@functools.partial(jax.jit, static_argnums=(3,))
def _raft(score_B, group_id_B, traj_mask_B, keep, threshold):
  mask_B = _mask(score_B, traj_mask_B)
  r_B = jnp.asarray(score_B, jnp.float32)
  if keep == "success":
    kept_B = r_B >= threshold
  else:
    real_B = jnp.where(mask_B > 0, r_B, -jnp.inf)
    top_N = jax.ops.segment_max(real_B, group_id_B, num_segments=r_B.shape[0])
    kept_B = real_B >= top_N[group_id_B]
  return kept_B.astype(jnp.float32) * mask_B
