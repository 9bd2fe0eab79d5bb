"""Turn-level estimators: one advantage per turn, `adv_BxT`.

Masked turns (`turn_mask_BxT == 0`) get exactly 0 and never enter a
statistic. Discounting skips masked turns: a hole in the mask passes the
running return through undiscounted, as if the turn were not there (which
is what a reference that stores only real turns computes).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from agentic_rl.estimators import common

GIGPO_MODES = ("mean_norm", "mean_std_norm")
EPISODE_STATS = ("per_trajectory", "per_turn")
BASELINES = ("per_turn_index", "group")
PRM_MODES = ("additive", "multiplicative", "cumulative")


def _check_turns(turn_reward_BxT, turn_mask_BxT, name="turn_reward_BxT"):
  """Checks a per-turn array (reported as `name`) and the mask of its shape."""
  common.check_array(name, turn_reward_BxT, (None, None), "float")
  shape = turn_reward_BxT.shape
  common.check_array("turn_mask_BxT", turn_mask_BxT, shape, "float")
  return shape


def _check_groups(group_id_B, b):
  common.check_array("group_id_B", group_id_B, (b,), "int")
  common.check_ids("group_id_B", group_id_B, b)


def discounted_returns(
  turn_reward_BxT: jax.Array,
  turn_mask_BxT: jax.Array,
  *,
  gamma: float,
) -> jax.Array:
  """G_t = r_t + gamma * G_{t+1} over real turns (reverse `lax.scan`)."""
  _check_turns(turn_reward_BxT, turn_mask_BxT)
  common.check_number("gamma", gamma, 0.0, 1.0)
  return _discounted_returns(turn_reward_BxT, turn_mask_BxT, gamma)


@functools.partial(jax.jit, static_argnums=(2,))
def _discounted_returns(turn_reward_BxT, turn_mask_BxT, gamma):
  r_TxB = jnp.asarray(turn_reward_BxT, jnp.float32).T
  m_TxB = jnp.asarray(turn_mask_BxT, jnp.float32).T > 0

  def back(running_B, rm):
    r_B, m_B = rm
    running_B = jnp.where(m_B, r_B + gamma * running_B, running_B)
    return running_B, jnp.where(m_B, running_B, 0.0)

  _, ret_TxB = jax.lax.scan(
    back, jnp.zeros_like(r_TxB[0]), (r_TxB, m_TxB), reverse=True
  )
  return ret_TxB.T


def _dense_pairs(group_N, anchor_N):
  """Dense ids of (group, anchor) pairs via one sort (the fallback path)."""
  order_N = jnp.lexsort((anchor_N, group_N))
  g_N, a_N = group_N[order_N], anchor_N[order_N]
  new_N = jnp.concatenate(
    [jnp.ones((1,), bool), (g_N[1:] != g_N[:-1]) | (a_N[1:] != a_N[:-1])]
  )
  sorted_ids_N = jnp.cumsum(new_N, dtype=jnp.int32) - 1
  return jnp.zeros_like(sorted_ids_N).at[order_N].set(sorted_ids_N)


def _step_groups(group_id_B, anchor_id_BxT, mask_BxT):
  """Segment ids of anchor-state groups: same group and same anchor.

  Packing makes anchor ids unique across groups, so they are the segment
  ids as they are (no sort). If a caller passes anchor ids that repeat
  across groups, a cheap in-graph check notices and a sort relabels the
  (group, anchor) pairs instead; only one branch runs.
  """
  b, t = anchor_id_BxT.shape
  n = b * t
  group_N = jnp.broadcast_to(group_id_B[:, None], (b, t)).reshape(n)
  anchor_N = anchor_id_BxT.reshape(n)
  valid_N = mask_BxT.reshape(n) > 0
  lo_S = jax.ops.segment_min(
    jnp.where(valid_N, group_N, b), anchor_N, num_segments=n
  )
  hi_S = jax.ops.segment_max(
    jnp.where(valid_N, group_N, -1), anchor_N, num_segments=n
  )
  unique = jnp.all((lo_S == hi_S) | (hi_S < 0))
  return jax.lax.cond(
    unique, lambda: anchor_N, lambda: _dense_pairs(group_N, anchor_N)
  )


def gigpo(
  turn_reward_BxT: jax.Array,
  turn_mask_BxT: jax.Array,
  group_id_B: jax.Array,
  anchor_id_BxT: jax.Array,
  *,
  gamma: float = 1.0,
  omega: float = 1.0,
  mode: str = "mean_norm",
  episode_stats: str = "per_trajectory",
  eps: float = 1e-6,
  singleton: str = "raw",
) -> jax.Array:
  """Group-in-Group Policy Optimization (Feng et al. 2025, arXiv 2505.10978).

  A_t = A_episode + omega * A_step, where
    A_episode normalizes each trajectory's outcome (the undiscounted sum of
      its turn rewards) within its group (paper Eq. 3), and
    A_step normalizes the discounted step return G_t (Eq. 5) within the
      anchor-state group of turn t: same `group_id` and same anchor id
      (Eq. 6-7). A step group of one gets A_step = 0.
  `mode="mean_norm"` subtracts the mean; `"mean_std_norm"` also divides by
  the unbiased (ddof=1) std plus eps.

  `episode_stats="per_trajectory"` counts each trajectory once in the
  episode statistics (the paper's Eq. 3). `"per_turn"` counts each
  trajectory once per real turn, which is what the authors' verl-agent
  implementation computes (its batch rows are turns); it agrees with that
  reference to float32 precision. `singleton` is the episode convention for
  a group of one (see `common.normalize`); `"raw"` matches the reference.
  Anchor ids are dense below B*T (see `data.packing.pack`).
  """
  b, t = _check_turns(turn_reward_BxT, turn_mask_BxT)
  _check_groups(group_id_B, b)
  common.check_array("anchor_id_BxT", anchor_id_BxT, (b, t), "int")
  common.check_ids("anchor_id_BxT", anchor_id_BxT, b * t)
  common.check_choice("mode", mode, GIGPO_MODES)
  common.check_choice("episode_stats", episode_stats, EPISODE_STATS)
  common.check_choice("singleton", singleton, common.SINGLETON_MODES)
  common.check_number("gamma", gamma, 0.0, 1.0)
  common.check_number("omega", omega)
  common.check_number("eps", eps, 0.0)
  return _gigpo(
    turn_reward_BxT,
    turn_mask_BxT,
    group_id_B,
    anchor_id_BxT,
    gamma,
    omega,
    mode,
    episode_stats,
    eps,
    singleton,
  )


@functools.partial(jax.jit, static_argnums=(4, 5, 6, 7, 8, 9))
def _gigpo(
  turn_reward_BxT,
  turn_mask_BxT,
  group_id_B,
  anchor_id_BxT,
  gamma,
  omega,
  mode,
  episode_stats,
  eps,
  singleton,
):
  b, t = turn_reward_BxT.shape
  std = mode == "mean_std_norm"
  mask_BxT = jnp.asarray(turn_mask_BxT, jnp.float32)
  reward_BxT = common.apply_mask(
    jnp.asarray(turn_reward_BxT, jnp.float32), mask_BxT
  )

  outcome_B = reward_BxT.sum(axis=1)
  turns_B = mask_BxT.sum(axis=1)
  weight_B = turns_B if episode_stats == "per_turn" else (turns_B > 0) * 1.0
  ep = common.SegmentStats(outcome_B, group_id_B, weight_B, b)
  ep_adv_B = common.normalize(
    outcome_B, ep, normalize_std=std, eps=eps, singleton=singleton
  )

  ret_N = _discounted_returns(reward_BxT, mask_BxT, gamma).reshape(b * t)
  step_N = _step_groups(group_id_B, anchor_id_BxT, mask_BxT)
  st = common.SegmentStats(ret_N, step_N, mask_BxT.reshape(b * t), b * t)
  step_adv_BxT = common.normalize(
    ret_N, st, normalize_std=std, eps=eps, singleton="zero"
  ).reshape(b, t)

  return common.apply_mask(ep_adv_B[:, None] + omega * step_adv_BxT, mask_BxT)


def turn_discounted(
  turn_reward_BxT: jax.Array,
  turn_mask_BxT: jax.Array,
  group_id_B: jax.Array,
  *,
  gamma: float = 0.95,
  baseline: str = "per_turn_index",
  normalize_std: bool = False,
  eps: float = 1e-6,
  singleton: str = "zero",
) -> jax.Array:
  """Discounted return-to-go minus a group baseline, per turn.

  A_t = G_t - b, with G_t the discounted return from turn t (Sutton & Barto
  ch. 13, REINFORCE with baseline) and b the mean of the same group's
  returns either at the same turn index (`baseline="per_turn_index"`, a
  time-dependent baseline) or over all of the group's turns (`"group"`).
  `normalize_std` divides by that set's unbiased std plus eps. Late turn
  indices are often reached by one trajectory only: with the default
  `singleton="zero"` such a turn gets 0 rather than its raw return.
  """
  b, t = _check_turns(turn_reward_BxT, turn_mask_BxT)
  _check_groups(group_id_B, b)
  common.check_choice("baseline", baseline, BASELINES)
  common.check_choice("singleton", singleton, common.SINGLETON_MODES)
  common.check_number("gamma", gamma, 0.0, 1.0)
  common.check_number("eps", eps, 0.0)
  return _turn_discounted(
    turn_reward_BxT,
    turn_mask_BxT,
    group_id_B,
    gamma,
    baseline,
    normalize_std,
    eps,
    singleton,
  )


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6, 7))
def _turn_discounted(
  turn_reward_BxT,
  turn_mask_BxT,
  group_id_B,
  gamma,
  baseline,
  normalize_std,
  eps,
  singleton,
):
  b, t = turn_reward_BxT.shape
  mask_BxT = jnp.asarray(turn_mask_BxT, jnp.float32)
  ret_BxT = _discounted_returns(turn_reward_BxT, mask_BxT, gamma)
  if baseline == "per_turn_index":
    seg_BxT = group_id_B[:, None] * t + jnp.arange(t)[None, :]
    num = b * t
  else:
    seg_BxT = jnp.broadcast_to(group_id_B[:, None], (b, t))
    num = b
  stats = common.SegmentStats(
    ret_BxT.reshape(-1), seg_BxT.reshape(-1), mask_BxT.reshape(-1), num
  )
  adv_N = common.normalize(
    ret_BxT.reshape(-1),
    stats,
    normalize_std=normalize_std,
    eps=eps,
    singleton=singleton,
  )
  return common.apply_mask(adv_N.reshape(b, t), mask_BxT)


def prm_weighted(
  outcome_B: jax.Array,
  group_id_B: jax.Array,
  process_score_BxT: jax.Array,
  turn_mask_BxT: jax.Array,
  *,
  mode: str = "additive",
  beta: float = 0.5,
  normalize_std: bool = True,
  eps: float = 1e-6,
) -> jax.Array:
  """Outcome advantage combined with per-turn process scores.

  The outcome part is GRPO's group-normalized outcome A_i (see `grpo`).
  Modes:
    additive:  A_t = A_i + beta * z_t, with z_t the process score normalized
      over all real turns of the group (mean, and std if `normalize_std`):
      outcome and dense process rewards summed after normalization, the
      combination used by PRIME (Cui et al. 2025, "Process Reinforcement
      through Implicit Rewards", Eq. for the combined advantage).
    cumulative: A_t = A_i + beta * sum_{s >= t} z_s, DeepSeekMath's process
      supervision (Shao et al. 2024, Sec. 4.1.3): a turn is credited with the
      normalized process rewards of itself and every later turn.
    multiplicative: A_t = A_i * w_t, with w_t = n * q_t / sum_s q_s over the
      trajectory's n real turns, where q_t = p_t for A_i >= 0 and 1 - p_t
      for A_i < 0 (scores clipped to [0, 1]). Weights sum to n, so each
      trajectory keeps the total credit of the uniform broadcast while
      success is credited to well-scored turns and failure blamed on badly
      scored ones. This redistribution is this project's construction
      (in the spirit of turn-level credit assignment, e.g. Zeng et al. 2025),
      not a formula from a paper; `beta` is unused in this mode.
  """
  b, t = _check_turns(process_score_BxT, turn_mask_BxT, "process_score_BxT")
  common.check_array("outcome_B", outcome_B, (b,), "float")
  _check_groups(group_id_B, b)
  common.check_choice("mode", mode, PRM_MODES)
  common.check_number("beta", beta)
  common.check_number("eps", eps, 0.0)
  return _prm_weighted(
    outcome_B,
    group_id_B,
    process_score_BxT,
    turn_mask_BxT,
    mode,
    beta,
    normalize_std,
    eps,
  )


@functools.partial(jax.jit, static_argnums=(4, 5, 6, 7))
def _prm_weighted(
  outcome_B,
  group_id_B,
  process_score_BxT,
  turn_mask_BxT,
  mode,
  beta,
  normalize_std,
  eps,
):
  b, t = process_score_BxT.shape
  mask_BxT = jnp.asarray(turn_mask_BxT, jnp.float32)
  p_BxT = common.apply_mask(
    jnp.asarray(process_score_BxT, jnp.float32), mask_BxT
  )
  r_B = jnp.asarray(outcome_B, jnp.float32)
  has_turns_B = (mask_BxT.sum(axis=1) > 0) * 1.0
  out = common.SegmentStats(r_B, group_id_B, has_turns_B, b)
  a_B = common.normalize(
    r_B, out, normalize_std=normalize_std, eps=eps, singleton="raw"
  )

  if mode == "multiplicative":
    p_BxT = jnp.clip(p_BxT, 0.0, 1.0)
    q_BxT = common.apply_mask(
      jnp.where(a_B[:, None] >= 0, p_BxT, 1.0 - p_BxT), mask_BxT
    )
    n_B = mask_BxT.sum(axis=1)
    total_B = q_BxT.sum(axis=1)
    # All-zero scores carry no preference: fall back to uniform weights.
    # Any positive total divides exactly (no eps floor), so weights sum to n.
    some_B = total_B > 0
    safe_total_B = jnp.where(some_B, total_B, 1.0)
    w_BxT = jnp.where(
      some_B[:, None], n_B[:, None] * q_BxT / safe_total_B[:, None], 1.0
    )
    return common.apply_mask(a_B[:, None] * w_BxT, mask_BxT)

  seg_BxT = jnp.broadcast_to(group_id_B[:, None], (b, t))
  proc = common.SegmentStats(
    p_BxT.reshape(-1), seg_BxT.reshape(-1), mask_BxT.reshape(-1), b
  )
  z_BxT = common.apply_mask(
    common.normalize(
      p_BxT.reshape(-1),
      proc,
      normalize_std=normalize_std,
      eps=eps,
      singleton="zero",
    ).reshape(b, t),
    mask_BxT,
  )
  if mode == "cumulative":
    z_BxT = _discounted_returns(z_BxT, mask_BxT, 1.0)
  return common.apply_mask(a_B[:, None] + beta * z_BxT, mask_BxT)
