"""Estimator goldens (by hand), properties (hypothesis) and bad input."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_rl import estimators as E
from agentic_rl.data import packing
from agentic_rl.types import Task, Trajectory, Turn
from tests.estimators import reference

F = np.float32

# ---------------------------------------------------------------- goldens


def test_grpo_golden():
  r = jnp.array([1.0, 0.0, 1.0, 0.0, 5.0])
  g = jnp.array([0, 0, 0, 1, 1])
  # group 0: mean 2/3, unbiased std sqrt(1/3); group 1: mean 2.5, std
  # sqrt(12.5).
  s0, s1 = np.sqrt(1 / 3), np.sqrt(12.5)
  want = [1 / 3 / s0, -2 / 3 / s0, 1 / 3 / s0, -2.5 / s1, 2.5 / s1]
  np.testing.assert_allclose(E.grpo(r, g, eps=0.0), want, rtol=1e-6)
  np.testing.assert_allclose(
    E.grpo(r, g, normalize_std=False),
    [1 / 3, -2 / 3, 1 / 3, -2.5, 2.5],
    rtol=1e-6,
  )


def test_rloo_golden():
  r = jnp.array([1.0, 0.0, 2.0, 7.0])
  g = jnp.array([0, 0, 0, 1])
  # 1 - mean(0, 2) = 0; 0 - mean(1, 2) = -1.5; 2 - mean(1, 0) = 1.5.
  np.testing.assert_allclose(E.rloo(r, g), [0.0, -1.5, 1.5, 0.0], atol=1e-6)
  np.testing.assert_allclose(E.rloo(r, g, singleton="raw")[3], 7.0)


def test_reinforce_pp_golden():
  r = jnp.array([1.0, 0.0, 3.0, 1.0])
  g = jnp.array([0, 0, 1, 1])
  x = np.array([0.5, -0.5, 1.0, -1.0])  # group-centred
  want = (x - x.mean()) / (x.std(ddof=1) + 1e-6)
  np.testing.assert_allclose(E.reinforce_pp_baseline(r, g), want, rtol=1e-5)


def test_raft_golden():
  r = jnp.array([1.0, 0.0, 1.0, 0.0, 0.0, 7.0])
  g = jnp.array([0, 0, 0, 1, 1, 2])
  mask = jnp.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.0])  # the last is padding
  np.testing.assert_array_equal(
    E.raft(r, g, traj_mask_B=mask), [1, 0, 1, 0, 0, 0]
  )
  ret = jnp.array([0.9, -0.3, 0.9, -0.5, -0.2, 9.0])
  # best of each group: ties kept, padding never the best nor kept
  np.testing.assert_array_equal(
    E.raft(ret, g, keep="best", traj_mask_B=mask), [1, 0, 1, 0, 1, 0]
  )
  np.testing.assert_array_equal(
    E.raft(ret, g, threshold=0.5), [1, 0, 1, 0, 0, 1]
  )
  with pytest.raises(ValueError, match="keep"):
    E.raft(r, g, keep="top")


def test_raft_first_epoch_is_sft_on_the_kept_samples():
  """At ratio 1 the policy-gradient step with RAFT advantages is the NLL
  gradient of the kept rows, scaled by kept / all rows (seq-mean)."""
  from agentic_rl import losses

  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.normal(size=(4, 6, 5)), jnp.float32)
  tokens = jnp.asarray(rng.integers(0, 5, (4, 6)))
  mask = jnp.asarray([[0, 1, 1, 1, 0, 0]] * 2 + [[0, 0, 1, 1, 1, 1]] * 2, F)
  adv_B = E.raft(jnp.array([1.0, 0.0, 0.0, 1.0]), jnp.array([0, 0, 1, 1]))
  adv_BxL = adv_B[:, None] * mask
  cfg = losses.PolicyLossConfig(agg="seq-mean-token-mean")
  old = losses.token_logp(logits, tokens)

  def pg(x):
    lp = losses.token_logp(x, tokens)
    return losses.policy_loss(lp, old, adv_BxL, mask, cfg)[0]

  kept = np.asarray(adv_B) > 0

  def sft(x):
    lp = losses.token_logp(x, tokens)[kept]
    return losses.sft_loss(lp, mask[kept], "seq-mean-token-mean")[0]

  np.testing.assert_allclose(
    jax.grad(pg)(logits), 0.5 * jax.grad(sft)(logits), atol=1e-6
  )


def test_discounted_returns_golden_with_hole():
  r = jnp.array([[1.0, 2.0, 4.0], [1.0, 9.0, 4.0]])
  m = jnp.array([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])
  # Row 1 skips its masked turn: G_0 = 1 + 0.5 * 4.
  want = [[1 + 0.5 * 2 + 0.25 * 4, 2 + 0.5 * 4, 4], [1 + 0.5 * 4, 0, 4]]
  np.testing.assert_allclose(E.discounted_returns(r, m, gamma=0.5), want)


def test_gigpo_golden():
  # One group of 3 trajectories; the first turn of every trajectory is in
  # the same state (anchor 0); trajectories 0 and 1 then meet in state 1.
  r = jnp.array([[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
  m = jnp.array([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
  g = jnp.array([0, 0, 0])
  a = jnp.array([[0, 1], [0, 1], [0, 2]])
  # Outcomes 1, 0, 1: episode mean 2/3. Returns (gamma .5): [.5, 1],
  # [0, 0], [1]. Anchor 0: {.5, 0, 1} mean .5; anchor 1: {1, 0} mean .5.
  ep = np.array([1 / 3, -2 / 3, 1 / 3])
  step = np.array([[0.0, 0.5], [-0.5, -0.5], [0.5, 0.0]])
  want = (ep[:, None] + 2.0 * step) * np.asarray(m)
  got = E.gigpo(r, m, g, a, gamma=0.5, omega=2.0)
  np.testing.assert_allclose(got, want, atol=1e-6)
  # mean_std_norm: episode std sqrt(1/3); anchor 0 std .5; anchor 1 std
  # sqrt(.5).
  ep_s = ep / (np.sqrt(1 / 3) + 1e-6)
  step_s = np.array(
    [
      [0.0, 0.5 / (np.sqrt(0.5) + 1e-6)],
      [-0.5 / (0.5 + 1e-6), -0.5 / (np.sqrt(0.5) + 1e-6)],
      [0.5 / (0.5 + 1e-6), 0.0],
    ]
  )
  got = E.gigpo(r, m, g, a, gamma=0.5, mode="mean_std_norm")
  np.testing.assert_allclose(
    got, (ep_s[:, None] + step_s) * np.asarray(m), rtol=1e-5
  )


def test_gigpo_per_turn_weights_trajectories_by_turns():
  r = jnp.array([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
  m = jnp.array([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
  g = jnp.array([0, 0])
  a = jnp.arange(6).reshape(2, 3)  # all distinct: no step part
  # per_turn mean = (3 * 1 + 1 * 0) / 4 = .75; per_trajectory mean = .5.
  per_turn = E.gigpo(r, m, g, a, episode_stats="per_turn")
  per_traj = E.gigpo(r, m, g, a)
  np.testing.assert_allclose(per_turn[:, 0], [0.25, -0.75], atol=1e-6)
  np.testing.assert_allclose(per_traj[:, 0], [0.5, -0.5], atol=1e-6)


def test_turn_discounted_golden():
  r = jnp.array([[0.0, 1.0], [0.0, 0.0], [2.0, 0.0]])
  m = jnp.array([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
  g = jnp.array([0, 0, 0])
  # Returns (gamma .5): [.5, 1], [0, 0], [2, -]. Turn 0 mean 2.5/3;
  # turn 1 mean .5 over two trajectories.
  want = [[0.5 - 2.5 / 3, 0.5], [-2.5 / 3, -0.5], [2 - 2.5 / 3, 0.0]]
  got = E.turn_discounted(r, m, g, gamma=0.5)
  np.testing.assert_allclose(got, want, atol=1e-6)
  # Baseline over all 5 real turns of the group: mean 3.5 / 5 = .7.
  got = E.turn_discounted(r, m, g, gamma=0.5, baseline="group")
  want = [[0.5 - 0.7, 1 - 0.7], [-0.7, -0.7], [2 - 0.7, 0.0]]
  np.testing.assert_allclose(got, want, atol=1e-6)


def test_prm_weighted_modes_golden():
  out = jnp.array([1.0, 0.0])
  g = jnp.array([0, 0])
  p = jnp.array([[0.2, 0.6], [0.8, 0.4]])
  m = jnp.ones((2, 2))
  a = np.array([0.5, -0.5])  # Dr.GRPO-style outcome part
  # additive: z over the group's 4 scores (mean .5), not std-normalized.
  z = np.array([[-0.3, 0.1], [0.3, -0.1]])
  got = E.prm_weighted(out, g, p, m, beta=2.0, normalize_std=False)
  np.testing.assert_allclose(got, a[:, None] + 2.0 * z, atol=1e-6)
  got = E.prm_weighted(
    out, g, p, m, mode="cumulative", beta=1.0, normalize_std=False
  )
  np.testing.assert_allclose(
    got, a[:, None] + [[-0.2, 0.1], [0.2, -0.1]], atol=1e-6
  )
  # multiplicative: success weights p / sum * n; failure weights (1-p).
  got = E.prm_weighted(out, g, p, m, mode="multiplicative", normalize_std=False)
  w0 = np.array([0.2, 0.6]) / 0.8 * 2
  w1 = np.array([0.2, 0.6]) / 0.8 * 2
  np.testing.assert_allclose(got, [0.5 * w0, -0.5 * w1], atol=1e-6)


def test_gae_golden_and_skips_masked():
  r = np.array([[0.0, 0.0, 1.0, 0.0]], F)
  v = np.array([[0.5, 9.0, 0.25, 0.0]], F)
  m = np.array([[1.0, 0.0, 1.0, 0.0]], F)
  adv, ret = E.gae(r, v, m, gamma=0.9, lam=0.8)
  # Last real step: delta = 1 - .25 = .75. First: delta = 0 + .9 * .25 -
  # .5 = -.275; A = -.275 + .72 * .75 = .265.
  np.testing.assert_allclose(adv, [[0.265, 0.0, 0.75, 0.0]], atol=1e-6)
  np.testing.assert_allclose(ret, [[0.765, 0.0, 1.0, 0.0]], atol=1e-6)


# ------------------------------------------------------------- properties


B_MAX, T_MAX = 16, 5  # fixed shapes: one compilation for all examples


@st.composite
def batches(draw, max_groups=4, max_g=4):
  """Random groups padded to (B_MAX, T_MAX) like `packing.pack` pads."""
  n_groups = draw(st.integers(1, max_groups))
  sizes = [draw(st.integers(1, max_g)) for _ in range(n_groups)]
  real = np.repeat(np.arange(n_groups), sizes)
  b, t = B_MAX, T_MAX
  # Padding rows are their own groups with every turn masked.
  group = np.concatenate([real, n_groups + np.arange(b - len(real))])
  group = group.astype(np.int32)
  lengths = np.array([draw(st.integers(0, t)) for _ in range(len(real))])
  lengths = np.concatenate([lengths, np.zeros(b - len(real), int)])
  mask = (np.arange(t)[None, :] < lengths[:, None]).astype(F)
  # Rewards on a coarse grid so ties (degenerate groups) are common.
  reward = np.array(
    draw(
      st.lists(
        st.sampled_from([0.0, 0.5, 1.0, -1.0]), min_size=b * t, max_size=b * t
      )
    ),
    F,
  ).reshape(b, t)
  # Few states so anchor groups of several turns are common.
  n_states = draw(st.integers(1, 4))
  states = np.array(
    draw(st.lists(st.integers(0, n_states - 1), min_size=b * t, max_size=b * t))
  )
  keys = [
    (int(group[i]), int(states[i * t + j])) if mask[i, j] else ("pad", i, j)
    for i in range(b)
    for j in range(t)
  ]
  anchor = packing.dense_ids(keys).reshape(b, t)
  process = np.array(
    draw(
      st.lists(st.sampled_from([0.0, 0.3, 1.0]), min_size=b * t, max_size=b * t)
    ),
    F,
  ).reshape(b, t)
  return dict(
    reward=reward, mask=mask, group=group, anchor=anchor, process=process
  )


def _all_turn_level(x, **kw):
  outcome = (x["reward"] * x["mask"]).sum(1)
  return {
    "gigpo": E.gigpo(x["reward"], x["mask"], x["group"], x["anchor"], **kw),
    "gigpo_std": E.gigpo(
      x["reward"],
      x["mask"],
      x["group"],
      x["anchor"],
      mode="mean_std_norm",
      **kw,
    ),
    "turn_discounted": E.turn_discounted(x["reward"], x["mask"], x["group"]),
    "turn_discounted_std": E.turn_discounted(
      x["reward"], x["mask"], x["group"], normalize_std=True, baseline="group"
    ),
    "prm_add": E.prm_weighted(outcome, x["group"], x["process"], x["mask"]),
    "prm_mul": E.prm_weighted(
      outcome, x["group"], x["process"], x["mask"], mode="multiplicative"
    ),
    "prm_cum": E.prm_weighted(
      outcome, x["group"], x["process"], x["mask"], mode="cumulative"
    ),
  }


@settings(max_examples=40, deadline=None)
@given(batches())
def test_masked_turns_exactly_zero_and_finite(x):
  for name, adv in _all_turn_level(x).items():
    adv = np.asarray(adv)
    assert np.all(np.isfinite(adv)), name
    assert np.all(adv[x["mask"] == 0] == 0.0), name


@settings(max_examples=40, deadline=None)
@given(
  batches(),
  st.sampled_from(["per_trajectory", "per_turn"]),
  st.sampled_from(["mean_norm", "mean_std_norm"]),
  st.sampled_from([1.0, 0.9]),
)
def test_gigpo_matches_row_reference(x, episode_stats, mode, gamma):
  got = E.gigpo(
    x["reward"],
    x["mask"],
    x["group"],
    x["anchor"],
    gamma=gamma,
    omega=0.7,
    mode=mode,
    episode_stats=episode_stats,
  )
  want = reference.gigpo_rows(
    x["reward"],
    x["mask"],
    x["group"],
    x["anchor"],
    gamma=gamma,
    omega=0.7,
    mode=mode,
    eps=1e-6,
    per_turn=episode_stats == "per_turn",
  )
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


@settings(max_examples=30, deadline=None)
@given(batches())
def test_gigpo_anchor_ids_shared_across_groups_take_the_sort_path(x):
  # Re-number anchors per group from 0, so equal ids repeat across groups:
  # the result must not change (step groups are (group, anchor) pairs).
  local = np.zeros_like(x["anchor"])
  for g in np.unique(x["group"]):
    rows = x["group"] == g
    _, inv = np.unique(x["anchor"][rows], return_inverse=True)
    local[rows] = inv.reshape(local[rows].shape)
  a = E.gigpo(x["reward"], x["mask"], x["group"], x["anchor"], gamma=0.9)
  b = E.gigpo(x["reward"], x["mask"], x["group"], local, gamma=0.9)
  np.testing.assert_allclose(a, b, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(batches(), st.sampled_from([-3.0, 0.5, 7.0]))
def test_constant_shift_invariance(x, c):
  r, g, m = x["reward"], x["group"], x["mask"]
  outcome = (r * m).sum(1)
  has = (m.sum(1) > 0).astype(F)
  fns = [
    lambda o: E.grpo(o, g, singleton="zero"),
    lambda o: E.grpo(o, g, normalize_std=False, singleton="zero"),
    lambda o: E.rloo(o, g),
  ]
  real_per_group = np.bincount(g, weights=has)
  if np.all(real_per_group[g[has > 0]] > 1):  # "raw" singletons keep c
    fns += [
      lambda o: E.grpo(o, g, traj_mask_B=has),
      lambda o: E.reinforce_pp_baseline(o, g, traj_mask_B=has),
    ]
  for fn in fns:
    np.testing.assert_allclose(fn(outcome), fn(outcome + c), atol=1e-4)
  # GiGPO (gamma 1): adding c to each trajectory's last real turn shifts
  # the outcome and every return-to-go by c.
  last = np.zeros_like(r)
  lengths = m.sum(1).astype(int)
  for i, n in enumerate(lengths):
    if n:
      last[i, n - 1] = c
  kw = dict(singleton="zero")
  for mode in ("mean_norm", "mean_std_norm"):
    a = E.gigpo(r, m, g, x["anchor"], mode=mode, **kw)
    b = E.gigpo(r + last, m, g, x["anchor"], mode=mode, **kw)
    np.testing.assert_allclose(
      a, b, atol=2e-3 if mode == "mean_std_norm" else 1e-4
    )


@settings(max_examples=30, deadline=None)
@given(batches())
def test_zero_group_mean(x):
  r, g, m = x["reward"], x["group"], x["mask"]
  outcome = (r * m).sum(1)
  multi = np.bincount(g)[g] > 1
  for adv in (
    E.grpo(outcome, g),
    E.grpo(outcome, g, normalize_std=False),
    E.rloo(outcome, g),
  ):
    sums = np.bincount(g, weights=np.asarray(adv, np.float64))
    np.testing.assert_allclose(sums[np.unique(g[multi])], 0.0, atol=1e-4)
  # GiGPO step part: zero mean within each anchor group.
  step = np.asarray(E.gigpo(r, m, g, x["anchor"], gamma=0.9)) - np.asarray(
    E.gigpo(r, m, g, x["anchor"], gamma=0.9, omega=0.0)
  )
  sums = np.bincount(x["anchor"].ravel(), weights=(step * m).ravel())
  np.testing.assert_allclose(sums, 0.0, atol=1e-4)


@settings(max_examples=30, deadline=None)
@given(batches())
def test_gigpo_omega_zero_is_episode_part_and_distinct_anchors(x):
  r, g, m = x["reward"], x["group"], x["mask"]
  has = (m.sum(1) > 0).astype(F)
  outcome = (r * m).sum(1)
  for mode, std in (("mean_norm", False), ("mean_std_norm", True)):
    ep = E.gigpo(r, m, g, x["anchor"], omega=0.0, mode=mode)
    want = E.grpo(outcome, g, normalize_std=std, traj_mask_B=has)
    np.testing.assert_allclose(ep, np.asarray(want)[:, None] * m, atol=1e-5)
    distinct = np.arange(r.size, dtype=np.int32).reshape(r.shape)
    full = E.gigpo(r, m, g, distinct, omega=3.0, mode=mode, gamma=0.9)
    np.testing.assert_allclose(full, ep, atol=1e-6)


@settings(max_examples=20, deadline=None)
@given(batches())
def test_jit_and_eager_agree(x):
  want = _all_turn_level(x)
  with jax.disable_jit():
    got = _all_turn_level(x)
  for name in want:
    np.testing.assert_allclose(got[name], want[name], atol=1e-5, err_msg=name)


def test_prm_multiplicative_keeps_total_credit():
  rng = np.random.default_rng(0)
  out = rng.integers(0, 2, 12).astype(F)
  g = np.repeat(np.arange(3), 4).astype(np.int32)
  p = rng.uniform(size=(12, 5)).astype(F)
  m = (np.arange(5)[None] < rng.integers(1, 6, 12)[:, None]).astype(F)
  a = E.grpo(out, g)
  got = E.prm_weighted(out, g, p, m, mode="multiplicative")
  np.testing.assert_allclose(np.asarray(got).sum(1), a * m.sum(1), atol=1e-5)


def test_prm_multiplicative_exact_weights_for_a_tiny_total():
  # Failed trajectory, scores 1 - k * u (u = 2**-24, exact in float32): its
  # q = 1 - p = (2u, 4u, 0) sum to 6u < eps, yet weights must still be
  # n * q / sum q = (1, 2, 0), summing to n = 3; a success with p ~ 1
  # gets weights ~ 1.
  u = 2.0**-24
  out = np.array([0.0, 1.0], F)
  g = np.array([0, 0], np.int32)
  p = np.array([[1 - 2 * u, 1 - 4 * u, 1.0], [1 - 2 * u, 1 - 2 * u, 1.0]], F)
  m = np.ones((2, 3), F)
  got = E.prm_weighted(out, g, p, m, mode="multiplicative", normalize_std=False)
  # Dr.GRPO outcome part: -0.5, 0.5.
  want = [[-0.5, -1.0, 0.0], [0.5, 0.5, 0.5]]
  np.testing.assert_allclose(got, want, atol=1e-6)
  # Uniform near-1 scores on the failure: q all tiny and equal, weights 1.
  p = np.full((2, 3), 1 - 2 * u, F)
  got = E.prm_weighted(out, g, p, m, mode="multiplicative", normalize_std=False)
  np.testing.assert_allclose(got, [[-0.5] * 3, [0.5] * 3], atol=1e-6)


def test_non_finite_values_in_masked_slots_change_nothing():
  # 0 * inf is NaN: a masked slot holding NaN or inf must not reach any
  # group statistic, nor the masked output itself.
  nan, inf = np.nan, np.inf
  g = np.array([0, 0, 0], np.int32)
  tm = np.array([1.0, 1.0, 0.0], F)
  o = np.array([1.0, 0.0, nan], F)
  np.testing.assert_allclose(
    E.grpo(o, g, traj_mask_B=tm, normalize_std=False), [0.5, -0.5, 0.0]
  )
  s = 0.5 / (np.sqrt(0.5) + 1e-6)  # unbiased std of {1, 0} is sqrt(.5)
  np.testing.assert_allclose(
    E.grpo(o, g, traj_mask_B=tm), [s, -s, 0.0], rtol=1e-6
  )
  np.testing.assert_allclose(E.rloo(o, g, traj_mask_B=tm), [1.0, -1.0, 0.0])
  o_inf = np.array([1.0, 0.0, inf], F)
  # Group-centred (.5, -.5), then batch-whitened: batch std sqrt(.5).
  np.testing.assert_allclose(
    E.reinforce_pp_baseline(o_inf, g, traj_mask_B=tm), [s, -s, 0.0], 1e-6
  )

  r = np.array([[1.0, inf], [0.0, nan]], F)
  m = np.array([[1.0, 0.0], [1.0, 0.0]], F)
  g2 = np.array([0, 0], np.int32)
  a = np.array([[0, 1], [0, 3]], np.int32)
  # Episode part (1, 0) -> (.5, -.5); both first turns share anchor 0 with
  # returns (1, 0) -> step part (.5, -.5).
  np.testing.assert_allclose(E.gigpo(r, m, g2, a), [[1.0, 0.0], [-1.0, 0.0]])
  np.testing.assert_allclose(
    E.turn_discounted(r, m, g2), [[0.5, 0.0], [-0.5, 0.0]]
  )

  # PRM: NaN scores on masked turns, a NaN outcome on a row with no turns.
  out = np.array([1.0, 0.0, nan], F)
  p = np.array([[0.2, nan], [0.8, 0.5], [nan, inf]], F)
  pm = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]], F)
  # Outcome part (.5, -.5, 0); real scores {.2, .8, .5} have mean .5.
  want = [[0.5 - 0.3, 0.0], [-0.5 + 0.3, -0.5], [0.0, 0.0]]
  for mode in ("additive", "cumulative"):
    got = E.prm_weighted(
      out, g, p, pm, mode=mode, beta=1.0, normalize_std=False
    )
    np.testing.assert_allclose(got, want, atol=1e-6, err_msg=mode)
  # Multiplicative: row 1 failed, q = 1 - p = (.2, .5), weights 2 q / .7.
  got = E.prm_weighted(
    out, g, p, pm, mode="multiplicative", normalize_std=False
  )
  want = [[0.5, 0.0], [-0.5 * 0.4 / 0.7, -0.5 * 1.0 / 0.7], [0.0, 0.0]]
  np.testing.assert_allclose(got, want, atol=1e-6)


def test_registry_estimators_ignore_non_finite_masked_slots():
  clean = _batch()
  mask = np.asarray(clean.turn_mask_BxT) > 0
  real_row = mask.any(axis=1)
  dirty = clean.replace(
    turn_reward_BxT=np.where(mask, clean.turn_reward_BxT, np.inf).astype(F),
    process_score_BxT=np.where(mask, clean.process_score_BxT, np.nan).astype(F),
    outcome_B=np.where(real_row, clean.outcome_B, np.nan).astype(F),
  )
  for name in (
    "grpo",
    "dr_grpo",
    "rloo",
    "reinforce_pp",
    "raft",
    "gigpo",
    "turn_discounted",
    "prm_weighted",
  ):
    np.testing.assert_array_equal(
      E.get(name)(dirty), E.get(name)(clean), err_msg=name
    )
  np.testing.assert_array_equal(
    E.get("grpo")(dirty, score="return"), E.get("grpo")(clean, score="return")
  )
  v = jnp.zeros(clean.tokens_BxL.shape, jnp.float32)
  for level in ("turn", "token"):
    got, want = (
      E.get("gae")(dirty, v, level=level),
      E.get("gae")(clean, v, level=level),
    )
    for x, y in zip(got, want, strict=True):
      np.testing.assert_array_equal(x, y, err_msg=level)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), st.integers(1, 12), st.data())
def test_gae_matches_loop(b, l, data):
  rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
  r = rng.normal(size=(b, l)).astype(F)
  v = rng.normal(size=(b, l)).astype(F)
  m = (rng.uniform(size=(b, l)) < 0.6).astype(F)
  adv, ret = E.gae(r, v, m, gamma=0.95, lam=0.9)
  want = reference.gae_loop(r, v, m, 0.95, 0.9)
  np.testing.assert_allclose(adv, want, atol=1e-5)
  np.testing.assert_allclose(ret, (want + v) * m, atol=1e-5)


def test_degenerate_inputs_are_finite():
  z = np.zeros((3, 4), F)
  g = np.array([0, 1, 2], np.int32)  # singletons
  a = np.arange(12, dtype=np.int32).reshape(3, 4)
  for mask in (np.zeros((3, 4), F), np.ones((3, 4), F)):
    for fn in (
      lambda mask=mask: E.gigpo(z, mask, g, a, mode="mean_std_norm"),
      lambda mask=mask: E.turn_discounted(z, mask, g, normalize_std=True),
      lambda mask=mask: E.prm_weighted(
        z[:, 0], g, z, mask, mode="multiplicative"
      ),
      lambda: E.grpo(z[:, 0], g),
      lambda: E.rloo(z[:, 0], g),
      lambda: E.reinforce_pp_baseline(z[:, 0], g),
    ):
      assert np.all(np.isfinite(fn()))
  # Singleton conventions: "raw" keeps the value, "zero" gives 0.
  o = np.array([2.0, 3.0, 4.0], F)
  np.testing.assert_allclose(E.grpo(o, g, eps=0.0), o)
  np.testing.assert_allclose(E.grpo(o, g, singleton="zero"), 0.0)


# -------------------------------------------------------------- bad input


def test_bad_input_names_the_argument():
  r = jnp.ones((4,))
  with pytest.raises(ValueError, match="group_id_B"):
    E.grpo(r, jnp.zeros((3,), jnp.int32))
  with pytest.raises(TypeError, match="group_id_B"):
    E.grpo(r, jnp.zeros((4,), jnp.float32))
  with pytest.raises(ValueError, match=r"group_id_B.*\[0, 4\)"):
    E.grpo(r, jnp.array([0, 1, 2, 4]))
  with pytest.raises(ValueError, match="turn_mask_BxT"):
    E.gigpo(
      jnp.ones((2, 3)),
      jnp.ones((2, 2)),
      jnp.zeros(2, jnp.int32),
      jnp.zeros((2, 3), jnp.int32),
    )
  with pytest.raises(ValueError, match="anchor_id_BxT"):
    E.gigpo(
      jnp.ones((2, 3)),
      jnp.ones((2, 3)),
      jnp.zeros(2, jnp.int32),
      jnp.full((2, 3), 6, jnp.int32),
    )
  with pytest.raises(ValueError, match="mode"):
    E.gigpo(
      jnp.ones((2, 3)),
      jnp.ones((2, 3)),
      jnp.zeros(2, jnp.int32),
      jnp.zeros((2, 3), jnp.int32),
      mode="median",
    )
  with pytest.raises(KeyError, match="unknown estimator 'gpro'"):
    E.get("gpro")
  with pytest.raises(ValueError, match="process_score_BxT"):
    E.prm_weighted(
      jnp.zeros(2), jnp.zeros(2, jnp.int32), jnp.zeros(2), jnp.ones((2, 2))
    )
  with pytest.raises(ValueError, match="turn_mask_BxT"):
    E.prm_weighted(
      jnp.zeros(2), jnp.zeros(2, jnp.int32), jnp.zeros((2, 2)), jnp.ones(2)
    )


# ---------------------------------------------------------------- registry


def _batch():
  def traj(group, rewards, states):
    turns = [
      Turn(
        obs_tokens=[1, 2],
        action_tokens=[3],
        action_logp=[-0.5],
        reward=r,
        state_key=s,
      )
      for r, s in zip(rewards, states, strict=True)
    ]
    return Trajectory(
      task=Task(id="t", family="f"),
      group_id=group,
      turns=turns,
      outcome=sum(rewards),
    )

  return packing.pack(
    [
      traj(7, [0.0, 1.0], ["a", "b"]),
      traj(7, [0.0, 0.0, 0.0], ["a", "c", "d"]),
      traj(9, [1.0], ["a"]),
    ],
    batch_size=4,
  )


def test_registry_and_config_select_by_name():
  batch = _batch()
  cfg = ml_collections.ConfigDict(
    {"name": "gigpo", "gamma": 0.9, "mode": "mean_std_norm"}
  )
  got = E.from_config(cfg)(batch)
  want = E.gigpo(
    batch.turn_reward_BxT,
    batch.turn_mask_BxT,
    batch.group_id_B,
    batch.anchor_id_BxT,
    gamma=0.9,
    mode="mean_std_norm",
  )
  np.testing.assert_array_equal(got, want)
  for name in E.names():
    if E.uses_values(name):  # needs a critic: tests/estimators/test_critic.py
      continue
    adv = E.get(name)(batch)
    assert adv.shape == batch.turn_mask_BxT.shape, name
    assert np.all(np.asarray(adv)[np.asarray(batch.turn_mask_BxT) == 0] == 0)
  # The padding row (4th) never shifts the statistics of real rows.
  np.testing.assert_allclose(
    E.get("grpo")(batch)[:3, 0],
    E.grpo(batch.outcome_B[:3], batch.group_id_B[:3])[:],
    atol=1e-6,
  )

  @E.register("test_double_reward")
  def double(batch, *, k=2.0):
    return k * batch.turn_reward_BxT * batch.turn_mask_BxT

  adv = E.from_config({"name": "test_double_reward", "k": 3.0})(batch)
  np.testing.assert_allclose(adv, 3.0 * batch.turn_reward_BxT)
  with pytest.raises(ValueError, match="already registered"):
    E.register("test_double_reward")(double)


@pytest.mark.parametrize(
  "cfg,match",
  [
    ({"name": "gigpo", "gama": 0.9}, "unexpected keyword argument 'gama'"),
    ({"name": "gigpo", "mode": "bogus"}, "mode must be one of"),
    ({"name": "gigpo", "gamma": 1.5}, "gamma must be a finite number in"),
    ({"name": "gigpo", "omega": float("nan")}, "omega must be a finite"),
    ({"name": "turn_discounted", "gamma": float("nan")}, "gamma"),
    ({"name": "turn_discounted", "gamma": True}, "gamma"),
    ({"name": "prm_weighted", "beta": float("inf")}, "beta"),
    ({"name": "grpo", "eps": -1e-6}, "eps"),
    ({"name": "reinforce_pp", "eps": float("nan")}, "eps"),
    ({"name": "raft", "threshold": float("nan")}, "threshold"),
    ({"name": "rloo", "singleton": "none"}, "singleton"),
    ({"name": "gae", "lam": 2.0}, "gamma and lam"),
  ],
)
def test_from_config_refuses_bad_hparams_when_read(cfg, match):
  """A typo, a bad choice or a number out of range fails when the config is
  read (the loop's setup), naming the estimator, not at the first RL step."""
  with pytest.raises(E.EstimatorConfigError, match=match) as info:
    E.from_config(cfg)
  assert repr(cfg["name"]) in str(info.value)


def test_from_config_refuses_an_estimator_that_returns_non_finite():
  @E.register("test_scaled_reward")
  def scaled(batch, *, k=1.0):
    return k * batch.turn_reward_BxT * batch.turn_mask_BxT

  E.from_config({"name": "test_scaled_reward", "k": 2.0})
  with pytest.raises(E.EstimatorConfigError, match="non-finite"):
    E.from_config({"name": "test_scaled_reward", "k": float("inf")})


def test_check_number():
  E.common.check_number("x", 0.0, 0.0, 1.0)
  E.common.check_number("x", np.float32(0.5), 0.0, 1.0)
  for bad in (float("nan"), float("inf"), -0.1, 1.1, True, "0.5", None):
    with pytest.raises(ValueError, match="x must be a finite number"):
      E.common.check_number("x", bad, 0.0, 1.0)


def test_outcome_estimators_can_rank_by_return():
  """score="return" feeds GRPO-family estimators the summed turn rewards
  (shaping and penalties) instead of the 0/1 outcome."""

  def traj(rewards, outcome):
    turns = [
      Turn(obs_tokens=[1], action_tokens=[3], action_logp=[-0.5], reward=r)
      for r in rewards
    ]
    return Trajectory(
      task=Task(id="t", family="f"), group_id=0, turns=turns, outcome=outcome
    )

  # Solved in 2 turns (return 0.9) vs failed in 3 (return -0.3).
  batch = packing.pack(
    [traj([-0.1, 1.0], 1.0), traj([-0.1, -0.1, -0.1], 0.0)], batch_size=2
  )
  mask = np.asarray(batch.turn_mask_BxT)
  by_outcome = np.asarray(E.from_config({"name": "dr_grpo"})(batch))
  by_return = np.asarray(
    E.from_config({"name": "dr_grpo", "score": "return"})(batch)
  )
  # Dr.GRPO = score minus the group mean, on every real turn.
  np.testing.assert_allclose(by_outcome, np.array([[0.5], [-0.5]]) * mask)
  np.testing.assert_allclose(
    by_return, np.array([[0.6], [-0.6]]) * mask, atol=1e-6
  )
  for name in ("grpo", "rloo", "reinforce_pp"):
    got = E.from_config({"name": name, "score": "return"})(batch)
    assert np.all(np.sign(np.asarray(got)[:, 0]) == [1, -1]), name
  with pytest.raises(ValueError, match="score 'returns'"):
    E.from_config({"name": "grpo", "score": "returns"})(batch)
