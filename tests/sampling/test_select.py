"""Token selection: top-k / top-p goldens, sampling frequencies, greedy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentic_rl.sampling import filter_logits, sampling_logprobs, select_tokens

NEG_INF = -np.inf


def _filter(logits, k, p):
  logits = jnp.asarray(logits, jnp.float32)
  s = logits.shape[0]
  return np.asarray(
    filter_logits(
      logits,
      jnp.full((s,), k, jnp.int32),
      jnp.full((s,), p, jnp.float32),
    )
  )


def test_top_k_golden():
  out = _filter([[3.0, 0.0, 2.0, 1.0]], 2, 1.0)
  np.testing.assert_array_equal(out, [[3.0, NEG_INF, 2.0, NEG_INF]])


def test_top_k_disabled_and_larger_than_vocab():
  logits = [[3.0, 0.0, 2.0, 1.0]]
  np.testing.assert_array_equal(_filter(logits, 0, 1.0), logits)
  np.testing.assert_array_equal(_filter(logits, 10, 1.0), logits)


@pytest.mark.parametrize(
  "p, kept", [(0.3, 1), (0.6, 2), (0.85, 3), (0.99, 4), (1.0, 4)]
)
def test_top_p_golden(p, kept):
  probs = np.asarray([0.05, 0.5, 0.15, 0.3])
  out = _filter(np.log(probs)[None], 0, p)[0]
  expected = np.argsort(-probs)[:kept]
  assert set(np.flatnonzero(np.isfinite(out))) == set(expected)


def test_top_p_applies_after_top_k_renormalisation():
  # After top-2 the kept mass is {0.5, 0.3} -> {0.625, 0.375}; p=0.6
  # then keeps only the first token.
  probs = np.asarray([0.5, 0.3, 0.15, 0.05])
  out = _filter(np.log(probs)[None], 2, 0.6)[0]
  assert list(np.isfinite(out)) == [True, False, False, False]


def test_per_row_parameters():
  logits = jnp.asarray([[3.0, 2.0, 1.0, 0.0]] * 3)
  out = np.asarray(
    filter_logits(logits, jnp.asarray([1, 0, 3]), jnp.asarray([1.0, 1.0, 1.0]))
  )
  assert np.isfinite(out).sum(axis=1).tolist() == [1, 4, 3]


def test_sampled_frequencies_match_reported_logprobs():
  logits_1xV = jnp.asarray([[1.0, 0.5, 0.0, -0.5, -1.0, 2.0]])
  n = 20_000
  logits_NxV = jnp.repeat(logits_1xV, n, axis=0)
  temp = jnp.full((n,), 0.7)
  top_k = jnp.full((n,), 4, jnp.int32)
  top_p = jnp.full((n,), 0.9)
  tokens, logp = jax.jit(select_tokens, static_argnames="filtered")(
    jax.random.key(0), logits_NxV, temp, top_k, top_p, filtered=True
  )
  tokens, logp = np.asarray(tokens), np.asarray(logp)
  # Reference distribution computed in numpy: temperature, top-4, top-0.9.
  scaled = np.asarray(logits_1xV[0]) / 0.7
  order = np.argsort(-scaled)[:4]
  probs = np.exp(scaled[order] - scaled[order].max())
  probs /= probs.sum()
  before = np.cumsum(probs) - probs
  keep = order[before < 0.9]
  ref = np.zeros(6)
  ref[keep] = np.exp(scaled[keep] - scaled[keep].max())
  ref /= ref.sum()
  freq = np.bincount(tokens, minlength=6) / n
  np.testing.assert_allclose(freq, ref, atol=0.015)
  np.testing.assert_allclose(logp, np.log(ref[tokens]), rtol=1e-5, atol=1e-6)


def test_greedy_is_argmax_with_model_logprob():
  logits = jnp.asarray([[0.1, 2.0, 0.3], [1.0, -1.0, 0.0]])
  select = jax.jit(select_tokens, static_argnames="filtered")
  tokens, logp = select(
    jax.random.key(0),
    logits,
    jnp.zeros((2,)),
    jnp.asarray([1, 1]),
    jnp.asarray([0.1, 0.1]),
    filtered=True,
  )
  assert tokens.tolist() == [1, 0]
  expected = jax.nn.log_softmax(logits, axis=-1)[jnp.arange(2), tokens]
  np.testing.assert_allclose(logp, expected, rtol=1e-6)


def test_unfiltered_temperature_one_is_model_distribution():
  logits = jax.random.normal(jax.random.key(1), (3, 11))
  logp = sampling_logprobs(
    logits,
    jnp.ones((3,)),
    jnp.zeros((3,), jnp.int32),
    jnp.ones((3,)),
    filtered=False,
  )
  np.testing.assert_allclose(
    logp, jax.nn.log_softmax(logits, axis=-1), rtol=1e-6
  )


def test_same_key_same_tokens():
  logits = jax.random.normal(jax.random.key(1), (64, 50))
  args = (logits, jnp.ones((64,)), jnp.zeros((64,), jnp.int32), jnp.ones(64))
  a, _ = select_tokens(jax.random.key(3), *args, filtered=False)
  b, _ = select_tokens(jax.random.key(3), *args, filtered=False)
  c, _ = select_tokens(jax.random.key(4), *args, filtered=False)
  np.testing.assert_array_equal(a, b)
  assert not np.array_equal(a, c)


def test_all_greedy_fast_path_matches_general_path():
  logits = jax.random.normal(jax.random.key(5), (6, 40))
  zeros = jnp.zeros((6,))
  args = (logits, zeros, jnp.zeros((6,), jnp.int32), jnp.ones((6,)))
  select = jax.jit(select_tokens, static_argnames=("filtered", "all_greedy"))
  fast = select(jax.random.key(0), *args, filtered=False, all_greedy=True)
  slow = select(jax.random.key(0), *args, filtered=True)
  np.testing.assert_array_equal(fast[0], slow[0])
  np.testing.assert_allclose(fast[1], slow[1], rtol=1e-6)
