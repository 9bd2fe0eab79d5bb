"""Choosing the next token from logits: greedy, temperature, top-k, top-p.

Every parameter is per row (S rows), so one compiled decode serves rows
with different settings, and changing a setting never recompiles. The
returned log-prob is that of the chosen token under the distribution it was
drawn from: temperature-scaled, then top-k, then top-p (the order HF
`generate` applies them), renormalised.

Greedy rows (temperature <= 0) take the argmax of the raw logits and report
its log-prob under the model's own distribution (temperature 1, no
filtering): a point mass would report 0, which is useless to a trainer that
compares behaviour and current log-probs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def filter_logits(
  logits_SxV: jax.Array, top_k_S: jax.Array, top_p_S: jax.Array
) -> jax.Array:
  """Sets logits outside each row's top-k, then top-p, set to -inf.

  top_k <= 0 disables top-k; top_p >= 1 disables top-p. Top-p keeps the
  smallest prefix of tokens (by decreasing probability, after top-k) whose
  mass reaches p; the most likely token is always kept. Tokens tied with the
  last kept logit are kept too.
  """
  v = logits_SxV.shape[-1]
  sorted_SxV = -jnp.sort(-logits_SxV, axis=-1)
  rank_1xV = jnp.arange(v)[None, :]
  in_top_k_SxV = (top_k_S[:, None] <= 0) | (rank_1xV < top_k_S[:, None])
  masked_SxV = jnp.where(in_top_k_SxV, sorted_SxV, -jnp.inf)
  probs_SxV = jax.nn.softmax(masked_SxV, axis=-1)
  mass_before_SxV = jnp.cumsum(probs_SxV, axis=-1) - probs_SxV
  # p >= 1 keeps everything explicitly: rounding can push the cumulative
  # mass to 1 before the tail and would drop real tokens.
  in_top_p_SxV = (top_p_S[:, None] >= 1.0) | (
    mass_before_SxV < top_p_S[:, None]
  )
  n_keep_S = jnp.sum(in_top_k_SxV & in_top_p_SxV, axis=-1)
  cutoff_S = jnp.take_along_axis(
    sorted_SxV, jnp.maximum(n_keep_S - 1, 0)[:, None], axis=-1
  )[:, 0]
  return jnp.where(logits_SxV >= cutoff_S[:, None], logits_SxV, -jnp.inf)


def sampling_logprobs(
  logits_SxV: jax.Array,
  temperature_S: jax.Array,
  top_k_S: jax.Array,
  top_p_S: jax.Array,
  *,
  filtered: bool,
) -> jax.Array:
  """Log-probs of the distribution each row samples from (SxV).

  Greedy rows (temperature <= 0) get the untempered model log-probs.
  `filtered` (static) skips the sort when no row uses top-k or top-p.
  """
  logits_SxV = logits_SxV.astype(jnp.float32)
  greedy_S = temperature_S <= 0
  scale_S = jnp.where(greedy_S, 1.0, temperature_S)
  scaled_SxV = logits_SxV / scale_S[:, None]
  if filtered:
    top_k_S = jnp.where(greedy_S, 0, top_k_S)
    top_p_S = jnp.where(greedy_S, 1.0, top_p_S)
    scaled_SxV = filter_logits(scaled_SxV, top_k_S, top_p_S)
  return jax.nn.log_softmax(scaled_SxV, axis=-1)


def select_tokens(
  key: jax.Array,
  logits_SxV: jax.Array,
  temperature_S: jax.Array,
  top_k_S: jax.Array,
  top_p_S: jax.Array,
  *,
  filtered: bool,
  all_greedy: bool = False,
) -> tuple[jax.Array, jax.Array]:
  """Returns (tokens_S int32, logp_S float32); see the module docstring.

  `all_greedy` (static) promises every temperature is <= 0; it skips the
  random draw, which is a sizeable part of a small model's decode step.
  """
  if all_greedy:
    tokens_S = jnp.argmax(logits_SxV, axis=-1).astype(jnp.int32)
    logp_SxV = jax.nn.log_softmax(logits_SxV.astype(jnp.float32), axis=-1)
    return tokens_S, jnp.take_along_axis(logp_SxV, tokens_S[:, None], -1)[:, 0]
  logp_SxV = sampling_logprobs(
    logits_SxV, temperature_S, top_k_S, top_p_S, filtered=filtered
  )
  sampled_S = jax.random.categorical(key, logp_SxV, axis=-1)
  greedy_S = temperature_S <= 0
  tokens_S = jnp.where(greedy_S, jnp.argmax(logits_SxV, axis=-1), sampled_S)
  tokens_S = tokens_S.astype(jnp.int32)
  logp_S = jnp.take_along_axis(logp_SxV, tokens_S[:, None], axis=-1)[:, 0]
  return tokens_S, logp_S
