"""Goldens and invariances for agentic_rl.losses."""

import math

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentic_rl import losses
from agentic_rl.losses import PolicyLossConfig

# ---------------------------------------------------------------------------
# token_logp / entropy alignment.


def test_token_logp_alignment_golden():
  # Logits at position 0 give p = (1/6, 2/6, 3/6); they predict token 1.
  row0 = [0.0, math.log(2.0), math.log(3.0)]
  logits = jnp.asarray([[row0, [0.0, 0.0, 0.0], [5.0, 5.0, 5.0]]])
  tokens = jnp.asarray([[1, 2, 0]])
  logp = losses.token_logp(logits, tokens)
  np.testing.assert_allclose(
    logp, [[0.0, math.log(3 / 6), math.log(1 / 3)]], rtol=1e-6
  )


def test_token_entropy_golden():
  row0 = [0.0, math.log(2.0), math.log(3.0)]
  logits = jnp.asarray([[row0, [1.0, 1.0, 1.0], [0.0, 0.0, 9.0]]])
  ent = losses.token_entropy(logits)
  h0 = -sum(p * math.log(p) for p in (1 / 6, 2 / 6, 3 / 6))
  np.testing.assert_allclose(ent, [[0.0, h0, math.log(3)]], rtol=1e-6)
  logp2, ent2 = losses.token_logp_and_entropy(logits, jnp.asarray([[0, 2, 1]]))
  np.testing.assert_allclose(ent2, ent, rtol=1e-6)
  np.testing.assert_allclose(
    logp2, losses.token_logp(logits, jnp.asarray([[0, 2, 1]])), rtol=1e-6
  )


def test_entropy_is_finite_with_neg_inf_logits():
  # A -inf logit (a token ruled out) has p = 0 and adds 0 to the entropy;
  # exp(-inf) * -inf alone would be NaN. Position 0 predicts token 1 from
  # two equal logits: entropy ln 2, log-prob -ln 2; token 0 gets 0.
  inf = float("inf")
  logits = jnp.asarray([[[0.0, 0.0, -inf], [0.0, 0.0, -inf]]])
  tokens = jnp.asarray([[0, 1]])
  want = [[0.0, math.log(2.0)]]
  np.testing.assert_allclose(losses.token_entropy(logits), want, rtol=1e-6)
  logp, ent = losses.token_logp_and_entropy(logits, tokens)
  np.testing.assert_allclose(ent, want, rtol=1e-6)
  np.testing.assert_allclose(logp, [[0.0, -math.log(2.0)]], rtol=1e-6)
  _, ent = losses.chunked_token_logp(
    logits, tokens, lambda x: x, 1, with_entropy=True
  )
  np.testing.assert_allclose(ent, want, rtol=1e-6)
  # d H / d logits is 0 at the uniform pair, and stays finite (0) at -inf.
  grad = jax.grad(lambda lg: losses.token_entropy(lg).sum())(logits)
  np.testing.assert_allclose(grad, np.zeros((1, 2, 3)), atol=1e-7)


def test_token_logp_matches_log_softmax_random():
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.normal(size=(2, 5, 7)) * 3, jnp.float32)
  tokens = jnp.asarray(rng.integers(0, 7, (2, 5)), jnp.int32)
  want = np.zeros((2, 5), np.float32)
  ls = np.asarray(jax.nn.log_softmax(logits, -1))
  for b in range(2):
    for t in range(1, 5):
      want[b, t] = ls[b, t - 1, int(tokens[b, t])]
  np.testing.assert_allclose(losses.token_logp(logits, tokens), want, 1e-5)


def test_token_logp_bad_shape():
  with pytest.raises(losses.LossShapeError):
    losses.token_logp(jnp.zeros((2, 5, 7)), jnp.zeros((2, 4), jnp.int32))


@pytest.mark.parametrize("length,chunk", [(12, 4), (13, 4), (5, 1), (7, 7)])
def test_chunked_token_logp_equals_whole_logits(length, chunk):
  # Chunks of positions through the projection: the same log-probs and
  # entropies as `token_logp_and_entropy` on the whole logits, and the
  # same gradients for the hidden states and the projection weights, for
  # lengths that are and are not a multiple of the chunk.
  rng = np.random.default_rng(length * 10 + chunk)
  h_BxLxD = jnp.asarray(rng.normal(size=(3, length, 6)), jnp.float32)
  w_DxV = jnp.asarray(rng.normal(size=(6, 11)), jnp.float32)
  tokens_BxL = jnp.asarray(rng.integers(0, 11, (3, length)), jnp.int32)
  weight_BxL = jnp.asarray(rng.normal(size=(3, length)), jnp.float32)

  def whole(h, w):
    return losses.token_logp_and_entropy(h @ w, tokens_BxL)

  def chunked(h, w):
    return losses.chunked_token_logp(
      h, tokens_BxL, lambda x: x @ w, chunk, with_entropy=True
    )

  for got, want in zip(
    jax.jit(chunked)(h_BxLxD, w_DxV),
    jax.jit(whole)(h_BxLxD, w_DxV),
    strict=True,
  ):
    assert got.shape == (3, length)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

  def objective(fn):
    def f(h, w):
      logp, ent = fn(h, w)
      return jnp.sum(weight_BxL * logp) + jnp.sum(jnp.cos(weight_BxL) * ent)

    return jax.jit(jax.grad(f, argnums=(0, 1)))(h_BxLxD, w_DxV)

  for got, want in zip(objective(chunked), objective(whole), strict=True):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  logp, ent = jax.jit(
    lambda h, w: losses.chunked_token_logp(
      h, tokens_BxL, lambda x: x @ w, chunk
    )
  )(h_BxLxD, w_DxV)
  assert ent is None
  np.testing.assert_allclose(
    logp, losses.token_logp(h_BxLxD @ w_DxV, tokens_BxL), rtol=1e-5, atol=1e-6
  )


@pytest.mark.parametrize("kind", ["forward_kl", "reverse_kl", "jsd"])
def test_chunked_distill_terms_equal_whole_logits(kind):
  # Student and teacher projected chunk by chunk: the same divergence,
  # top-1 agreement, log-probs and entropy as the whole-logits functions,
  # the same student gradients, and no gradient into the teacher.
  rng = np.random.default_rng(7)
  s_BxLxD, t_BxLxD = (
    jnp.asarray(rng.normal(size=(2, 11, 5)), jnp.float32) for _ in range(2)
  )
  ws_DxV, wt_DxV = (
    jnp.asarray(rng.normal(size=(5, 9)), jnp.float32) for _ in range(2)
  )
  tokens_BxL = jnp.asarray(rng.integers(0, 9, (2, 11)), jnp.int32)
  mix_BxL = jnp.asarray(rng.normal(size=(2, 11)), jnp.float32)

  def whole(s, ws, t):
    sl, tl = s @ ws, t @ wt_DxV
    logp, ent = losses.token_logp_and_entropy(sl, tokens_BxL)
    return {
      "logp": logp,
      "entropy": ent,
      "divergence": losses.token_divergence(sl, tl, kind, 1.5, 0.3),
      "agreement": losses.top1_agreement(sl, tl),
    }

  def chunked(s, ws, t):
    return losses.chunked_distill_terms(
      s, t, tokens_BxL, lambda x: x @ ws, lambda x: x @ wt_DxV, 4,
      kind, 1.5, 0.3, with_entropy=True,
    )  # fmt: skip

  want = jax.jit(whole)(s_BxLxD, ws_DxV, t_BxLxD)
  got = jax.jit(chunked)(s_BxLxD, ws_DxV, t_BxLxD)
  assert set(got) == set(want)
  for k in want:
    np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)

  def grads(fn):
    def f(s, ws, t):
      terms = fn(s, ws, t)
      return jnp.sum(mix_BxL * (terms["divergence"] + terms["logp"]))

    return jax.jit(jax.grad(f, argnums=(0, 1, 2)))(s_BxLxD, ws_DxV, t_BxLxD)

  got_g, want_g = grads(chunked), grads(whole)
  for g, w in zip(got_g[:2], want_g[:2], strict=True):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
  np.testing.assert_array_equal(got_g[2], 0.0)  # the teacher is frozen


def test_chunked_token_logp_bad_input():
  h = jnp.zeros((2, 5, 3))
  with pytest.raises(losses.LossShapeError, match="hidden"):
    losses.chunked_token_logp(h, jnp.zeros((2, 4), jnp.int32), lambda x: x, 2)
  with pytest.raises(losses.LossConfigError, match="chunk_len"):
    losses.chunked_token_logp(h, jnp.zeros((2, 5), jnp.int32), lambda x: x, 0)


# ---------------------------------------------------------------------------
# Aggregation goldens.

VALUES = jnp.asarray(
  [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 0.0, 0.0], [9.0, 9.0, 9.0, 9.0]]
)
MASK = jnp.asarray(
  [[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
)


@pytest.mark.parametrize(
  "mode,norm,want",
  [
    ("token-mean", None, (1 + 2 + 3 + 5) / 4),
    ("seq-mean-token-sum", None, (6 + 5) / 2),
    ("seq-mean-token-mean", None, (2 + 5) / 2),
    ("seq-mean-token-sum-norm", None, (6 / 4 + 5 / 4) / 2),
    ("seq-mean-token-sum-norm", 10, (0.6 + 0.5) / 2),
  ],
)
def test_aggregate_golden(mode, norm, want):
  # The third row is all padding: it must not count as a sequence.
  got = losses.aggregate(VALUES, MASK, mode, norm)
  np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("mode", losses.AGG_MODES)
def test_aggregate_empty_mask_is_zero(mode):
  got = losses.aggregate(VALUES, jnp.zeros_like(MASK), mode)
  assert float(got) == 0.0


def test_aggregate_unknown_mode():
  with pytest.raises(losses.LossConfigError, match="unknown aggregation"):
    losses.aggregate(VALUES, MASK, "seq-sum")


# ---------------------------------------------------------------------------
# Clipped objective goldens.

# (advantage, ratio) -> per-token loss with clip_low=0.2, clip_high=0.28.
CLIP_CASES = [
  (1.0, 1.5, -1.28, 0.0),  # A>0 above 1+eps_high: clipped, no gradient
  (1.0, 0.5, -0.5, -0.5),  # A>0 below 1-eps_low: pessimistic = unclipped
  (-1.0, 0.5, 0.8, 0.0),  # A<0 below 1-eps_low: clipped, no gradient
  (-1.0, 1.5, 1.5, 1.5),  # A<0 above 1+eps_high: unclipped
  (2.0, 1.1, -2.2, -2.2),  # inside the trust region
  (-1.0, 5.0, 5.0, 5.0),  # A<0, huge ratio: dual clip caps this one
]


def _clip_inputs():
  adv = jnp.asarray([[a for a, *_ in CLIP_CASES]])
  ratio = jnp.asarray([[r for _, r, *_ in CLIP_CASES]])
  old = jnp.full_like(ratio, -1.0)
  logp = old + jnp.log(ratio)
  mask = jnp.ones_like(ratio)
  return logp, old, adv, mask


def test_clipped_pg_goldens_and_grads():
  logp, old, adv, mask = _clip_inputs()
  per_tok, ratio = losses.clipped_pg_loss(logp, old, adv, 0.2, 0.28)
  np.testing.assert_allclose(ratio, [[r for _, r, *_ in CLIP_CASES]], 1e-5)
  np.testing.assert_allclose(per_tok, [[c[2] for c in CLIP_CASES]], rtol=1e-5)
  # d(per-token loss)/d logp = -A * r where unclipped, 0 where clipped.
  grad = jax.grad(
    lambda lp: jnp.sum(losses.clipped_pg_loss(lp, old, adv, 0.2, 0.28)[0])
  )(logp)
  np.testing.assert_allclose(
    grad, [[c[3] for c in CLIP_CASES]], rtol=1e-5, atol=1e-7
  )


def test_dual_clip_golden():
  logp, old, adv, _ = _clip_inputs()
  per_tok, _ = losses.clipped_pg_loss(logp, old, adv, 0.2, 0.28, clip_c=3.0)
  want = [c[2] for c in CLIP_CASES]
  want[-1] = 3.0  # -A * clip_c; the other A<0 tokens are below the cap
  np.testing.assert_allclose(per_tok, [want], rtol=1e-5)
  grad = jax.grad(
    lambda lp: jnp.sum(losses.clipped_pg_loss(lp, old, adv, 0.2, 0.28, 3.0)[0])
  )(logp)
  assert float(grad[0, -1]) == 0.0


def test_policy_loss_clip_metrics_golden():
  logp, old, adv, mask = _clip_inputs()
  cfg = PolicyLossConfig(clip_low=0.2, clip_high=0.28, clip_c=3.0)
  loss, m = losses.policy_loss(logp, old, adv, mask, cfg)
  want = [c[2] for c in CLIP_CASES]
  want[-1] = 3.0
  np.testing.assert_allclose(loss, np.mean(want), rtol=1e-5)
  np.testing.assert_allclose(m["pg_loss"], np.mean(want), rtol=1e-5)
  np.testing.assert_allclose(m["clip_frac_high"], 1 / 6, rtol=1e-6)
  np.testing.assert_allclose(m["clip_frac_low"], 1 / 6, rtol=1e-6)
  np.testing.assert_allclose(m["dual_clip_frac"], 1 / 6, rtol=1e-6)
  ratios = np.asarray([c[1] for c in CLIP_CASES])
  np.testing.assert_allclose(m["ratio_mean"], ratios.mean(), rtol=1e-5)
  np.testing.assert_allclose(m["ratio_max"], 5.0, rtol=1e-5)
  np.testing.assert_allclose(m["ratio_min"], 0.5, rtol=1e-5)
  approx = np.mean(ratios - 1 - np.log(ratios))
  np.testing.assert_allclose(m["approx_kl"], approx, rtol=1e-5)


# ---------------------------------------------------------------------------
# KL estimators.


@pytest.mark.parametrize(
  "est,want",
  [
    ("k1", [1.0, -1.0, 0.0]),
    ("k2", [0.5, 0.5, 0.0]),
    ("k3", [math.exp(-1.0), math.e - 2.0, 0.0]),
  ],
)
def test_kl_goldens(est, want):
  logp = jnp.asarray([[-1.0, -2.0, -0.5]])
  ref = jnp.asarray([[-2.0, -1.0, -0.5]])
  np.testing.assert_allclose(losses.kl_penalty(logp, ref, est), [want], 1e-6)


@pytest.mark.parametrize("est", losses.KL_ESTIMATORS)
def test_kl_loss_gradient_in_expectation(est):
  # As a loss on tokens sampled from pi (the sampling itself not
  # differentiated), each estimator's expected gradient, summed exactly
  # over a 5-token vocabulary: k1's is 0, k2's is the gradient of
  # KL(pi || ref), k3's that of the forward KL(ref || pi).
  ref = jax.nn.log_softmax(jnp.asarray([0.3, -1.2, 2.0, 0.0, -0.4]))
  theta = jnp.asarray([1.0, 0.5, -1.5, 0.2, 0.0])

  def expected_penalty(t):
    logp = jax.nn.log_softmax(t)
    weights = jax.lax.stop_gradient(jnp.exp(logp))
    return jnp.sum(weights * losses.kl_penalty(logp[None], ref[None], est)[0])

  def reverse_kl(t):
    logp = jax.nn.log_softmax(t)
    return jnp.sum(jnp.exp(logp) * (logp - ref))

  def forward_kl(t):
    return jnp.sum(jnp.exp(ref) * (ref - jax.nn.log_softmax(t)))

  want = {
    "k1": jnp.zeros_like(theta),
    "k2": jax.grad(reverse_kl)(theta),
    "k3": jax.grad(forward_kl)(theta),
  }[est]
  got = jax.grad(expected_penalty)(theta)
  np.testing.assert_allclose(got, want, atol=1e-6)
  # The two KL gradients differ here, so the test tells them apart.
  assert (
    np.abs(jax.grad(reverse_kl)(theta) - jax.grad(forward_kl)(theta)).max()
    > 0.1
  )


def test_kl_unknown_estimator():
  with pytest.raises(losses.LossConfigError, match="k4"):
    losses.kl_penalty(jnp.zeros((1, 2)), jnp.zeros((1, 2)), "k4")


def test_policy_loss_with_kl_and_entropy_golden():
  # Two tokens at ratio 1, A = (1, -1); seq-mean-token-sum over one row.
  logp = jnp.asarray([[0.0, -1.0, -2.0]])
  old = logp
  adv = jnp.asarray([[0.0, 1.0, -1.0]])
  mask = jnp.asarray([[0.0, 1.0, 1.0]])
  ref = jnp.asarray([[0.0, -2.0, -1.0]])
  ent = jnp.asarray([[0.0, 0.5, 1.5]])
  cfg = PolicyLossConfig(
    kl_coef=0.1, entropy_coef=0.01, agg="seq-mean-token-sum"
  )
  loss, m = losses.policy_loss(
    logp, old, adv, mask, cfg, ref_logp_BxL=ref, entropy_BxL=ent
  )
  pg = -1.0 + 1.0
  kl = math.exp(-1.0) + (math.e - 2.0)  # k3 of the two tokens, summed
  entropy = 0.5 + 1.5
  np.testing.assert_allclose(m["pg_loss"], pg, atol=1e-6)
  np.testing.assert_allclose(m["kl"], kl, rtol=1e-6)
  np.testing.assert_allclose(m["entropy"], entropy, rtol=1e-6)
  np.testing.assert_allclose(loss, pg + 0.1 * kl - 0.01 * entropy, rtol=1e-5)


def test_policy_loss_with_a_teacher_term_golden():
  # Two tokens at ratio 1, A = (2, -1); token-mean over the mask. The
  # divergence at the masked position (99) must not count.
  logp = jnp.asarray([[0.0, -1.0, -2.0]])
  adv = jnp.asarray([[0.0, 2.0, -1.0]])
  mask = jnp.asarray([[0.0, 1.0, 1.0]])
  div = jnp.asarray([[99.0, 0.3, 0.5]])
  pg = (-2.0 + 1.0) / 2
  for pg_coef, teacher_coef in ((1.0, 0.5), (0.0, 2.0), (0.25, 0.0)):
    cfg = PolicyLossConfig(pg_coef=pg_coef, teacher_coef=teacher_coef)
    loss, m = losses.policy_loss(
      logp, logp, adv, mask, cfg, teacher_div_BxL=div
    )
    np.testing.assert_allclose(m["pg_loss"], pg, atol=1e-6)
    np.testing.assert_allclose(m["teacher_div"], 0.4, rtol=1e-6)
    np.testing.assert_allclose(
      loss, pg_coef * pg + teacher_coef * 0.4, rtol=1e-6
    )
  # pg_coef 0: the advantages get no gradient path, the divergence does.
  cfg = PolicyLossConfig(pg_coef=0.0, teacher_coef=1.0)
  g_logp, g_div = jax.grad(
    lambda lp, d: losses.policy_loss(
      lp, logp, adv, mask, cfg, teacher_div_BxL=d
    )[0],
    argnums=(0, 1),
  )(logp, div)
  np.testing.assert_array_equal(g_logp, 0.0)
  np.testing.assert_allclose(g_div, [[0.0, 0.5, 0.5]])


# ---------------------------------------------------------------------------
# Gradients never reach observation / padding tokens.


@pytest.mark.parametrize("agg", losses.AGG_MODES)
@pytest.mark.parametrize("kl_estimator", losses.KL_ESTIMATORS)
def test_no_gradient_through_masked_tokens(agg, kl_estimator):
  b, l, v = 3, 9, 11
  rng = np.random.default_rng(7)
  logits = jnp.asarray(rng.normal(size=(b, l, v)) * 2, jnp.float32)
  tokens = jnp.asarray(rng.integers(0, v, (b, l)), jnp.int32)
  mask_np = (rng.uniform(size=(b, l)) < 0.5).astype(np.float32)
  mask_np[:, 0] = 0.0
  mask_np[2] = 0.0  # row 2: all padding
  mask = jnp.asarray(mask_np)
  adv = jnp.asarray(rng.normal(size=(b, l)), jnp.float32)
  # Garbage off the mask: it must neither leak gradient nor make NaN.
  behaviour = rng.normal(size=(b, l)) - 2.0
  old = jnp.asarray(np.where(mask_np > 0, behaviour, -1e30), jnp.float32)
  ref = jnp.asarray(np.where(mask_np > 0, behaviour - 0.3, 1e30), jnp.float32)
  cfg = PolicyLossConfig(
    clip_high=0.28,
    clip_c=3.0,
    kl_coef=0.05,
    kl_estimator=kl_estimator,
    entropy_coef=0.01,
    agg=agg,
  )

  def loss_fn(lg):
    logp, ent = losses.token_logp_and_entropy(lg, tokens)
    return losses.policy_loss(
      logp, old, adv, mask, cfg, ref_logp_BxL=ref, entropy_BxL=ent
    )[0]

  loss, grad = jax.value_and_grad(loss_fn)(logits)
  assert np.isfinite(float(loss))
  grad = np.asarray(grad)
  assert np.all(np.isfinite(grad))
  # The logit at position i predicts token i+1.
  predicts_masked = np.asarray(mask[:, 1:]) == 0
  assert np.all(grad[:, :-1][predicts_masked] == 0.0)
  assert np.all(grad[:, -1] == 0.0)
  assert np.any(grad[:, :-1][~predicts_masked] != 0.0)


@settings(deadline=None, max_examples=25)
@given(
  garbage=hnp.arrays(np.float32, (2, 6), elements=st.floats(-1e6, 1e6)),
  agg=st.sampled_from(losses.AGG_MODES),
)
def test_loss_invariant_to_masked_values(garbage, agg):
  rng = np.random.default_rng(0)
  logp = jnp.asarray(rng.normal(size=(2, 6)) - 1, jnp.float32)
  old = logp + jnp.asarray(rng.normal(size=(2, 6)) * 0.1, jnp.float32)
  adv = jnp.asarray(rng.normal(size=(2, 6)), jnp.float32)
  ref = logp - 0.2
  mask = jnp.asarray([[0, 1, 1, 0, 1, 0], [0, 0, 1, 1, 0, 0]], jnp.float32)
  cfg = PolicyLossConfig(kl_coef=0.1, clip_c=3.0, agg=agg)
  base, _ = losses.policy_loss(logp, old, adv, mask, cfg, ref_logp_BxL=ref)
  off = mask == 0
  g = jnp.asarray(garbage)
  noisy, m = losses.policy_loss(
    logp,
    jnp.where(off, g, old),
    jnp.where(off, g, adv),
    mask,
    cfg,
    ref_logp_BxL=jnp.where(off, -g, ref),
  )
  np.testing.assert_allclose(noisy, base, rtol=1e-6, atol=1e-7)
  assert all(np.isfinite(float(x)) for x in m.values())


def test_policy_loss_jit_matches_eager():
  logp, old, adv, mask = _clip_inputs()
  cfg = PolicyLossConfig(clip_high=0.28, clip_c=3.0, agg="seq-mean-token-mean")
  eager = losses.policy_loss(logp, old, adv, mask, cfg)
  jitted = jax.jit(losses.policy_loss, static_argnums=4)(
    logp, old, adv, mask, cfg
  )
  jax.tree.map(
    lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), eager, jitted
  )


# ---------------------------------------------------------------------------
# Config and input errors.


@pytest.mark.parametrize(
  "kwargs,match",
  [
    ({"clip_c": 1.0}, "clip_c"),
    ({"clip_low": 1.0}, "clip_low"),
    ({"clip_high": -0.1}, "clip_high"),
    ({"agg": "mean"}, "aggregation"),
    ({"kl_estimator": "k9"}, "KL estimator"),
    ({"norm_length": 0}, "norm_length"),
    ({"kl_coef": -1.0}, "kl_coef"),
    ({"pg_coef": -1.0}, "pg_coef"),
    ({"teacher_coef": -0.5}, "teacher_coef"),
    ({"pg_coef": 0.0}, "nothing else drives"),
    ({"teacher_divergence": "kl"}, "divergence"),
    ({"teacher_temperature": 0.0}, "temperature"),
    ({"ratio_level": "episode"}, "ratio_level"),
    # NaN compares False with every bound, so each needs its own refusal.
    ({"kl_coef": float("nan")}, "kl_coef"),
    ({"entropy_coef": float("nan")}, "entropy_coef"),
    ({"entropy_coef": float("inf")}, "entropy_coef"),
    ({"clip_high": float("nan")}, "clip_high"),
    ({"clip_low": float("nan")}, "clip_low"),
    ({"clip_c": float("nan")}, "clip_c"),
    ({"teacher_coef": float("inf")}, "teacher_coef"),
    ({"teacher_temperature": float("nan")}, "teacher_temperature"),
    ({"teacher_divergence": "jsd", "teacher_beta": float("nan")}, "beta"),
    ({"kl_coef": True}, "kl_coef"),
  ],
)
def test_bad_config(kwargs, match):
  with pytest.raises(losses.LossConfigError, match=match):
    PolicyLossConfig(**kwargs)


def test_one_sided_clip_is_allowed():
  """clip_high = inf is a real setting (no upper clip), unlike NaN."""
  logp = jnp.log(jnp.array([[3.0, 0.5]]))  # ratios 3 and 0.5 against old 0
  old, adv, mask = jnp.zeros((1, 2)), jnp.ones((1, 2)), jnp.ones((1, 2))
  # A = 1: max(-r, -clip(r, 0.8, 1 + clip_high)) is -0.5 for r = 0.5 and,
  # for r = 3, -1.2 under the default clip but -3 with no upper clip.
  for clip_high, want in ((0.2, (-1.2 - 0.5) / 2), (float("inf"), -1.75)):
    cfg = PolicyLossConfig(clip_high=clip_high)
    loss, _ = losses.policy_loss(logp, old, adv, mask, cfg)
    np.testing.assert_allclose(float(loss), want, rtol=1e-6)


def test_distill_coefs_refuse_nan():
  with pytest.raises(losses.LossConfigError, match="kd_coef"):
    losses.check_distill_coefs(float("nan"), 1.0)
  losses.check_distill_coefs(0.0, 1.0)  # SFT alone is fine


def test_policy_loss_missing_inputs_and_shapes():
  x = jnp.zeros((2, 3))
  with pytest.raises(losses.LossConfigError, match="ref_logp"):
    losses.policy_loss(x, x, x, x, PolicyLossConfig(kl_coef=0.1))
  with pytest.raises(losses.LossConfigError, match="entropy"):
    losses.policy_loss(x, x, x, x, PolicyLossConfig(entropy_coef=0.1))
  with pytest.raises(losses.LossConfigError, match="teacher_div"):
    losses.policy_loss(x, x, x, x, PolicyLossConfig(teacher_coef=0.1))
  with pytest.raises(losses.LossShapeError):
    losses.policy_loss(x, x, jnp.zeros((2, 4)), x, PolicyLossConfig())


# ---------------------------------------------------------------------------
# SFT and DPO.


def test_sft_loss_golden():
  logp = jnp.asarray([[0.0, -1.0, -2.0, -9.0], [0.0, -3.0, -5.0, -5.0]])
  mask = jnp.asarray([[0, 1, 1, 0], [0, 1, 0, 0]], jnp.float32)
  loss, m = losses.sft_loss(logp, mask)
  np.testing.assert_allclose(loss, (1 + 2 + 3) / 3, rtol=1e-6)
  np.testing.assert_allclose(m["perplexity"], math.exp(2.0), rtol=1e-6)
  assert float(m["tokens"]) == 3.0
  seq, _ = losses.sft_loss(logp, mask, "seq-mean-token-mean")
  np.testing.assert_allclose(seq, (1.5 + 3) / 2, rtol=1e-6)


def test_sequence_logp_golden():
  logp = jnp.asarray([[0.0, -1.0, -2.0, -9.0]])
  mask = jnp.asarray([[0, 1, 1, 0]], jnp.float32)
  np.testing.assert_allclose(losses.sequence_logp(logp, mask), [-3.0])


def test_dpo_golden():
  chosen = jnp.asarray([-1.0, -4.0, 7.0])
  rejected = jnp.asarray([-3.0, -2.0, 7.0])
  ref_c = jnp.asarray([-2.0, -4.0, 0.0])
  ref_r = jnp.asarray([-2.0, -2.0, 0.0])
  pair_mask = jnp.asarray([1.0, 1.0, 0.0])  # third pair is padding
  loss, m = losses.dpo_loss(
    chosen, rejected, ref_c, ref_r, beta=0.5, pair_mask_B=pair_mask
  )
  # Pair 0: margin 0.5 * (1 - (-1)) = 1; pair 1: margin 0.
  want = (math.log1p(math.exp(-1.0)) + math.log(2.0)) / 2
  np.testing.assert_allclose(loss, want, rtol=1e-6)
  np.testing.assert_allclose(m["reward_margin"], 0.5, rtol=1e-6)
  np.testing.assert_allclose(m["reward_accuracy"], 0.5, rtol=1e-6)
  np.testing.assert_allclose(m["reward_chosen"], 0.25, rtol=1e-6)
  np.testing.assert_allclose(m["reward_rejected"], -0.25, rtol=1e-6)
  smooth, _ = losses.dpo_loss(
    chosen[:1], rejected[:1], ref_c[:1], ref_r[:1], 0.5, label_smoothing=0.1
  )
  want_s = 0.9 * math.log1p(math.exp(-1.0)) + 0.1 * math.log1p(math.e)
  np.testing.assert_allclose(smooth, want_s, rtol=1e-6)


def test_dpo_bad_inputs():
  x = jnp.zeros((3,))
  with pytest.raises(losses.LossConfigError, match="beta"):
    losses.dpo_loss(x, x, x, x, beta=0.0)
  with pytest.raises(losses.LossShapeError):
    losses.dpo_loss(x, x, x, jnp.zeros((4,)))


def test_extreme_log_ratio_stays_finite():
  # A token the new policy likes e^200 times more, with a negative advantage:
  # unclipped by PPO, it would overflow to inf without the clamp.
  logp = jnp.asarray([[0.0, -0.1]])
  old = jnp.asarray([[0.0, -200.1]])
  adv = jnp.asarray([[0.0, -1.0]])
  mask = jnp.asarray([[0.0, 1.0]])
  loss, m = losses.policy_loss(logp, old, adv, mask, PolicyLossConfig())
  np.testing.assert_allclose(loss, math.exp(losses.MAX_LOG_RATIO), rtol=1e-5)
  assert all(np.isfinite(float(v)) for v in m.values())


# ---------------------------------------------------------------------------
# Distillation divergences.


def _two_token_logits(student_row, teacher_row):
  """[1, 2, V] logits whose position 0 predicts token 1."""
  s = jnp.asarray([[student_row, [0.0] * len(student_row)]], jnp.float32)
  t = jnp.asarray([[teacher_row, [0.0] * len(teacher_row)]], jnp.float32)
  return s, t


def test_divergences_match_hand_values():
  # teacher p = (1/4, 3/4), student q = (1/2, 1/2)
  s, t = _two_token_logits([0.0, 0.0], [0.0, math.log(3.0)])
  fwd = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
  rev = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
  m = (0.375, 0.625)  # beta = 0.5 mixture
  jsd = 0.5 * (0.25 * math.log(0.25 / m[0]) + 0.75 * math.log(0.75 / m[1]))
  jsd += 0.5 * (0.5 * math.log(0.5 / m[0]) + 0.5 * math.log(0.5 / m[1]))
  for kind, want in (("forward_kl", fwd), ("reverse_kl", rev), ("jsd", jsd)):
    div = np.asarray(losses.token_divergence(s, t, kind))
    assert div.shape == (1, 2)
    assert div[0, 0] == 0.0  # nothing predicts the first token
    np.testing.assert_allclose(div[0, 1], want, rtol=1e-5, err_msg=kind)


def test_divergence_temperature_scales_by_its_square():
  rng = np.random.default_rng(0)
  s = jnp.asarray(rng.normal(size=(2, 5, 7)), jnp.float32)
  t = jnp.asarray(rng.normal(size=(2, 5, 7)), jnp.float32)
  for kind in losses.DIVERGENCES:
    hot = losses.token_divergence(s, t, kind, temperature=2.0)
    cold = losses.token_divergence(s / 2.0, t / 2.0, kind, temperature=1.0)
    np.testing.assert_allclose(hot, 4.0 * cold, rtol=1e-5, err_msg=kind)


def test_divergences_are_zero_at_the_teacher_and_grad_free_for_it():
  rng = np.random.default_rng(1)
  t = jnp.asarray(rng.normal(size=(2, 6, 9)), jnp.float32)
  for kind in losses.DIVERGENCES:
    np.testing.assert_allclose(
      losses.token_divergence(t, t, kind), 0.0, atol=1e-6
    )

    def total(s_logits, t_logits, kind=kind):
      return jnp.sum(losses.token_divergence(s_logits, t_logits, kind))

    s = t + jnp.asarray(rng.normal(size=t.shape), jnp.float32)
    g_student, g_teacher = jax.grad(total, argnums=(0, 1))(s, t)
    assert float(jnp.abs(g_student).sum()) > 0
    assert float(jnp.abs(g_teacher).sum()) == 0.0, kind
  # jsd with beta = 0.5 is symmetric in its two distributions
  np.testing.assert_allclose(
    losses.token_divergence(s, t, "jsd"),
    losses.token_divergence(t, s, "jsd"),
    rtol=1e-5,
  )


def test_forward_kl_is_finite_when_the_teacher_rules_tokens_out():
  s, t = _two_token_logits([0.0, 0.0, 0.0], [0.0, 0.0, -jnp.inf])
  div = losses.token_divergence(s, t, "forward_kl")
  np.testing.assert_allclose(div[0, 1], math.log(1.5), rtol=1e-6)
  g = jax.grad(lambda x: losses.token_divergence(x, t).sum())(s)
  assert np.isfinite(np.asarray(g)).all()


def test_distill_loss_combines_kd_and_nll_over_the_mask():
  div = jnp.asarray([[0.0, 1.0, 3.0, 5.0]])
  logp = jnp.asarray([[0.0, -1.0, -2.0, -9.0]])
  mask = jnp.asarray([[0, 1, 1, 0]])
  loss, m = losses.distill_loss(div, logp, mask, kd_coef=0.5, sft_coef=2.0)
  np.testing.assert_allclose(m["divergence"], 2.0)  # (1 + 3) / 2
  np.testing.assert_allclose(m["nll_per_token"], 1.5)
  np.testing.assert_allclose(loss, 0.5 * 2.0 + 2.0 * 1.5)
  assert float(m["tokens"]) == 2.0


def test_distillation_settings_are_checked():
  s, t = _two_token_logits([0.0, 0.0], [0.0, 1.0])
  with pytest.raises(losses.LossConfigError, match="divergence"):
    losses.token_divergence(s, t, "kl")
  with pytest.raises(losses.LossConfigError, match="temperature"):
    losses.token_divergence(s, t, temperature=0.0)
  with pytest.raises(losses.LossConfigError, match="beta"):
    losses.token_divergence(s, t, "jsd", beta=1.0)
  with pytest.raises(losses.LossShapeError, match="vocabulary"):
    losses.token_divergence(s, jnp.zeros((1, 2, 3)))
  z = jnp.zeros((1, 2))
  with pytest.raises(losses.LossConfigError, match="both 0"):
    losses.distill_loss(z, z, z, kd_coef=0.0, sft_coef=0.0)


# ---------------------------------------------------------------------------
# The critic's value loss.


def test_value_loss_golden_and_clipping_gradient():
  value = jnp.asarray([[1.0, 2.0, 0.5]])
  old = jnp.asarray([[0.5, 0.5, 0.5]])
  target = jnp.asarray([[2.0, 0.0, 9.0]])
  mask = jnp.asarray([[1.0, 1.0, 0.0]])  # the last position never counts
  plain, m = losses.value_loss(value, old, target, mask)
  assert float(plain) == pytest.approx(0.5 * (1.0 + 4.0) / 2)
  assert float(m["value_clip_frac"]) == 0.0
  assert float(m["value_mean"]) == pytest.approx(1.5)
  # clip 0.2: both predictions are held at 0.7; errors 1.69 (> 1, the
  # clipped one counts) and 0.49 (< 4, the unclipped one counts).
  clipped, m = losses.value_loss(value, old, target, mask, clip=0.2)
  assert float(clipped) == pytest.approx(0.5 * (1.69 + 4.0) / 2, rel=1e-6)
  assert float(m["value_clip_frac"]) == pytest.approx(0.5)
  grad = jax.grad(lambda v: losses.value_loss(v, old, target, mask, 0.2)[0])
  # Position 0 moved past the clip in the direction that would help: no
  # gradient; position 1: d/dv 0.5 * (v - 0)^2 / 2 = v / 2 = 1.
  np.testing.assert_allclose(grad(value), [[0.0, 1.0, 0.0]], atol=1e-6)
  with pytest.raises(losses.LossConfigError, match="value clip"):
    losses.value_loss(value, old, target, mask, clip=-1.0)
  with pytest.raises(losses.LossShapeError):
    losses.value_loss(value, old[:, :2], target, mask)


# ---------------------------------------------------------------------------
# Importance ratio per turn / per sequence (GSPO).


def _level_loss(
  level, logp, old, adv, mask, turn_id, agg="seq-mean-token-mean"
):
  cfg = PolicyLossConfig(
    clip_low=0.2, clip_high=0.28, agg=agg, ratio_level=level
  )
  return losses.policy_loss(logp, old, adv, mask, cfg, turn_id_BxL=turn_id)


def test_sequence_ratio_golden_clips_whole_rows():
  # Row 0: trained tokens at 1..3 with ratios 1.1, 1.3, 0.9; row 1: ratios
  # 2.0 and 1.0 (tokens 1, 2). Observation tokens hold garbage ratios.
  ratio = np.array([[7.0, 1.1, 1.3, 0.9, 7.0], [7.0, 2.0, 1.0, 7.0, 7.0]])
  mask = np.array([[0, 1, 1, 1, 0], [0, 1, 1, 0, 0]], np.float32)
  old = jnp.full(ratio.shape, -1.0)
  logp = old + jnp.log(jnp.asarray(ratio, jnp.float32))
  adv = jnp.ones(ratio.shape)
  turn_id = jnp.zeros(ratio.shape, jnp.int32)
  s0 = (1.1 * 1.3 * 0.9) ** (1 / 3)  # 1.0877 < 1.28: row 0 unclipped
  s1 = math.sqrt(2.0)  # 1.414 > 1.28: row 1 clipped at 1.28, whole
  loss, m = _level_loss("sequence", logp, old, adv, mask, turn_id)
  np.testing.assert_allclose(loss, (-s0 - 1.28) / 2, rtol=1e-5)
  np.testing.assert_allclose(m["ratio_max"], s1, rtol=1e-5)
  np.testing.assert_allclose(m["clip_frac_high"], 2 / 5, rtol=1e-6)
  grad = jax.grad(
    lambda lp: _level_loss("sequence", lp, old, adv, mask, turn_id)[0]
  )(logp)
  # d/dlogp_t of mean_rows(mean_t(-A s)) = -s / (2 rows * 3 tokens) in row 0;
  # 0 for both of row 1's tokens (token-level PPO would train the 1.0 one).
  want = np.zeros(ratio.shape)
  want[0, 1:4] = -s0 / 6
  np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-8)
  token_grad = jax.grad(
    lambda lp: _level_loss("token", lp, old, adv, mask, turn_id)[0]
  )(logp)
  assert float(token_grad[1, 2]) == pytest.approx(-1.0 / 4)


def test_turn_ratio_golden():
  # One row: obs (turn 0), actions a b (turn 0), obs (turn 1), action c
  # (turn 1), padding. Turn 0's ratio sqrt(1.2 * 0.8), turn 1's 1.5.
  ratio = np.array([[3.0, 1.2, 0.8, 3.0, 1.5, 3.0]], np.float32)
  mask = jnp.asarray([[0, 1, 1, 0, 1, 0]], jnp.float32)
  turn_id = jnp.asarray([[0, 0, 0, 1, 1, -1]])
  adv = jnp.asarray([[1.0, 1.0, 1.0, -1.0, -1.0, 0.0]])
  old = jnp.full(ratio.shape, -2.0)
  logp = old + jnp.log(jnp.asarray(ratio))
  s0, s1 = math.sqrt(1.2 * 0.8), 1.5
  loss, m = _level_loss("turn", logp, old, adv, mask, turn_id, "token-mean")
  # A < 0 above 1 + clip_high: unclipped, loss -A * r = 1.5.
  np.testing.assert_allclose(loss, (-2 * s0 + s1) / 3, rtol=1e-5)
  np.testing.assert_allclose(m["ratio_mean"], (2 * s0 + s1) / 3, rtol=1e-5)
  grad = jax.grad(
    lambda lp: _level_loss("turn", lp, old, adv, mask, turn_id, "token-mean")[0]
  )(logp)
  want = [[0.0, -s0 / 3, -s0 / 3, 0.0, s1 / 3, 0.0]]
  np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-8)


def test_ratio_levels_agree_on_policy_and_turn_of_one_token_is_token():
  rng = np.random.default_rng(0)
  shape = (4, 12)
  logp = jnp.asarray(rng.normal(-2.0, 0.5, shape), jnp.float32)
  adv = jnp.asarray(rng.normal(size=shape), jnp.float32)
  mask = jnp.asarray(rng.random(shape) < 0.6, jnp.float32)
  turn_id = jnp.asarray(np.sort(rng.integers(0, 3, shape), axis=1))

  def loss_and_grad(level, old, turns=turn_id):
    return jax.value_and_grad(
      lambda lp: _level_loss(level, lp, old, adv, mask, turns)[0]
    )(logp)

  # On-policy every ratio is 1: the three levels are the same objective.
  ref = loss_and_grad("token", logp)
  for level in ("turn", "sequence"):
    got = loss_and_grad(level, logp)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-6, atol=1e-9)
  # Off-policy they differ; with one trained token per turn, turn = token.
  old = logp + jnp.asarray(rng.normal(0.0, 0.3, shape), jnp.float32)
  assert not np.allclose(
    loss_and_grad("sequence", old)[1], loss_and_grad("token", old)[1]
  )
  own_turn = jnp.broadcast_to(jnp.arange(shape[1]), shape)
  got, want = loss_and_grad("turn", old, own_turn), loss_and_grad("token", old)
  np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
  np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-9)
  # jit (the config is static) matches eager.
  jitted = jax.jit(
    lambda lp, o: _level_loss("turn", lp, o, adv, mask, turn_id)[0]
  )
  np.testing.assert_allclose(
    jitted(logp, old),
    _level_loss("turn", logp, old, adv, mask, turn_id)[0],
    rtol=1e-6,
  )


def test_approx_kl_is_per_token_k3_at_every_ratio_level():
  # Row 0 trains tokens 1, 2 with ratios 2 and 1/2; row 1 token 1 with
  # ratio e. Masked tokens hold garbage ratios. Per-token k3 = r - 1 - ln r:
  # (1 - ln 2) + (-1/2 + ln 2) = 1/2 in row 0, e - 2 in row 1; approx_kl is
  # their token mean (e - 3/2) / 3 at every level, though the sequence ratio
  # of row 0, sqrt(2 * 1/2) = 1, would give it 0.
  ratio = np.array([[7.0, 2.0, 0.5], [7.0, math.e, 7.0]], np.float32)
  mask = jnp.asarray([[0, 1, 1], [0, 1, 0]], jnp.float32)
  old = jnp.full(ratio.shape, -1.0)
  logp = old + jnp.log(jnp.asarray(ratio))
  adv = jnp.ones(ratio.shape)
  turn_id = jnp.zeros(ratio.shape, jnp.int32)
  ent = jnp.asarray([[9.0, 1.0, 2.0], [9.0, 3.0, 9.0]])
  for level in ("token", "turn", "sequence"):
    cfg = PolicyLossConfig(agg="seq-mean-token-sum", ratio_level=level)
    _, m = losses.policy_loss(
      logp, old, adv, mask, cfg, entropy_BxL=ent, turn_id_BxL=turn_id
    )
    np.testing.assert_allclose(
      m["approx_kl"], (math.e - 1.5) / 3, rtol=1e-5, err_msg=level
    )
    # entropy follows `agg` (row sums 3 and 3, mean over rows), not the
    # token mean 2, as the policy_loss docstring says.
    np.testing.assert_allclose(m["entropy"], 3.0, rtol=1e-6, err_msg=level)


def test_turn_ratio_needs_turn_ids():
  x = jnp.zeros((2, 3))
  with pytest.raises(losses.LossConfigError, match="needs turn_id_BxL"):
    losses.policy_loss(x, x, x, x + 1, PolicyLossConfig(ratio_level="turn"))
  with pytest.raises(losses.LossShapeError):
    losses.policy_loss(
      x, x, x, x, PolicyLossConfig(ratio_level="turn"), turn_id_BxL=x[:, :2]
    )
