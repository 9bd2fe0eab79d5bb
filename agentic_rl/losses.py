"""Policy-gradient losses: log-probs, entropy, clipped ratio, KL, aggregation;
and the supervised, preference and distillation losses on the same masks.

Pure functions of arrays, jittable, no model or config objects beyond the
frozen `PolicyLossConfig`.

Alignment convention (used everywhere in the project): the logit at position
i predicts token i+1, so `token_logp` and `token_entropy` return arrays whose
entry t belongs to *token t* (the distribution it was drawn from). Position 0
has no prediction and gets 0. Loss masks, behaviour log-probs and advantages
are all aligned to the predicted token, which is how `data.packing.pack` lays
them out: `loss_mask_BxL[b, t] == 1` iff token t was emitted by the policy.

Sign convention: every loss here is minimized. Advantages are "higher is
better".
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable
from typing import Literal

import jax
import jax.numpy as jnp

AggMode = Literal[
  "token-mean",
  "seq-mean-token-sum",
  "seq-mean-token-mean",
  "seq-mean-token-sum-norm",
]
AGG_MODES: tuple[str, ...] = (
  "token-mean",
  "seq-mean-token-sum",
  "seq-mean-token-mean",
  "seq-mean-token-sum-norm",
)
KlEstimator = Literal["k1", "k2", "k3"]
KL_ESTIMATORS: tuple[str, ...] = ("k1", "k2", "k3")
RatioLevel = Literal["token", "turn", "sequence"]
RATIO_LEVELS: tuple[str, ...] = ("token", "turn", "sequence")
Divergence = Literal["forward_kl", "reverse_kl", "jsd"]
DIVERGENCES: tuple[str, ...] = ("forward_kl", "reverse_kl", "jsd")

# exp(20) ~ 5e8: far beyond any clip range, far below float32 overflow.
MAX_LOG_RATIO = 20.0


class LossConfigError(ValueError):
  """A loss hyper-parameter is out of range or names an unknown mode."""


class LossShapeError(ValueError):
  """Loss inputs do not share the same [B, L] shape."""


def _check_same_shape(**arrays: jax.Array | None) -> None:
  shapes = {k: tuple(v.shape) for k, v in arrays.items() if v is not None}
  if len(set(shapes.values())) > 1:
    raise LossShapeError(f"inputs must share one [B, L] shape, got {shapes}")
  for k, s in shapes.items():
    if len(s) != 2:
      raise LossShapeError(f"{k} must be rank 2 [B, L], got shape {s}")


# ---------------------------------------------------------------------------
# Log-probs and entropy.


def _shift_right(x_BxL: jax.Array) -> jax.Array:
  """Moves predictions for token t+1 (made at t) onto index t+1; 0 at t=0."""
  return jnp.pad(x_BxL, ((0, 0), (1, 0)))


def token_logp(logits_BxLxV: jax.Array, tokens_BxL: jax.Array) -> jax.Array:
  """Log-prob of each token given its prefix, aligned to the token.

  out[b, t] = log softmax(logits[b, t-1])[tokens[b, t]] for t >= 1, and
  out[b, 0] = 0. Computed in float32 whatever the logits dtype.
  """
  if logits_BxLxV.ndim != 3 or tokens_BxL.shape != logits_BxLxV.shape[:2]:
    raise LossShapeError(
      f"logits {logits_BxLxV.shape} and tokens {tokens_BxL.shape} must be "
      "[B, L, V] and [B, L]"
    )
  logits_BxMxV = logits_BxLxV[:, :-1].astype(jnp.float32)
  next_BxM = tokens_BxL[:, 1:]
  # Gather-then-subtract avoids materializing a second [B, L, V] array.
  picked_BxM = jnp.take_along_axis(logits_BxMxV, next_BxM[..., None], axis=-1)
  lse_BxM = jax.nn.logsumexp(logits_BxMxV, axis=-1)
  return _shift_right(picked_BxM[..., 0] - lse_BxM)


def token_entropy(logits_BxLxV: jax.Array) -> jax.Array:
  """Entropy of the distribution each token was drawn from (0 at t=0)."""
  logits_BxMxV = logits_BxLxV[:, :-1].astype(jnp.float32)
  logp_BxMxV = jax.nn.log_softmax(logits_BxMxV, axis=-1)
  return _shift_right(_entropy(logp_BxMxV))


def token_logp_and_entropy(
  logits_BxLxV: jax.Array, tokens_BxL: jax.Array
) -> tuple[jax.Array, jax.Array]:
  """Both of the above from one log-softmax."""
  if logits_BxLxV.ndim != 3 or tokens_BxL.shape != logits_BxLxV.shape[:2]:
    raise LossShapeError(
      f"logits {logits_BxLxV.shape} and tokens {tokens_BxL.shape} must be "
      "[B, L, V] and [B, L]"
    )
  logits_BxMxV = logits_BxLxV[:, :-1].astype(jnp.float32)
  logp_BxMxV = jax.nn.log_softmax(logits_BxMxV, axis=-1)
  picked_BxM = _picked(logp_BxMxV, tokens_BxL[:, 1:])
  return _shift_right(picked_BxM), _shift_right(_entropy(logp_BxMxV))


def map_position_chunks(
  fn: Callable[..., dict[str, jax.Array]],
  chunk_len: int,
  next_BxL: jax.Array,
  *arrays_BxLx: jax.Array,
) -> dict[str, jax.Array]:
  """Per-position terms computed `chunk_len` positions at a time.

  `fn(next_BxC, *chunks_BxCx)` gets each chunk of the next tokens
  (`next_BxL[:, t]` is token t+1) and of `arrays_BxLx` ([B, L, ...], cut
  along L), and returns a dict of [B, C] terms for the predictions made
  at those positions. Chunks run one after another, each under
  `jax.checkpoint`, so whatever `fn` builds per chunk (logits, say) is
  only ever held for one chunk, in the backward pass too. The terms come
  back aligned like `token_logp` (entry t belongs to token t; 0 at t = 0).
  L need not be a multiple of `chunk_len`.
  """
  b, l = next_BxL.shape
  if not isinstance(chunk_len, int) or chunk_len <= 0:
    raise LossConfigError(f"chunk_len must be a positive int: {chunk_len!r}")
  for x in arrays_BxLx:
    if x.shape[:2] != (b, l):
      raise LossShapeError(
        f"chunked arrays must start with [B, L] = {(b, l)}: {x.shape}"
      )
  n = -(-l // chunk_len)
  pad = n * chunk_len - l

  def chunks(x_BxLx: jax.Array) -> jax.Array:
    widths = ((0, 0), (0, pad)) + ((0, 0),) * (x_BxLx.ndim - 2)
    x = jnp.pad(x_BxLx, widths)
    return x.reshape(b, n, chunk_len, *x.shape[2:]).swapaxes(0, 1)

  terms_NxBxC = jax.lax.map(
    jax.checkpoint(lambda xs: fn(*xs)),
    tuple(chunks(x) for x in (next_BxL, *arrays_BxLx)),
  )

  def unchunk(x_NxBxC: jax.Array) -> jax.Array:
    return _shift_right(x_NxBxC.swapaxes(0, 1).reshape(b, -1)[:, : l - 1])

  return {k: unchunk(v) for k, v in terms_NxBxC.items()}


def next_tokens(tokens_BxL: jax.Array) -> jax.Array:
  """Token t+1 at index t (the one position t predicts); 0 at the end."""
  return jnp.pad(tokens_BxL[:, 1:], ((0, 0), (0, 1)))


def chunked_token_logp(
  hidden_BxLxD: jax.Array,
  tokens_BxL: jax.Array,
  project: Callable[[jax.Array], jax.Array],
  chunk_len: int,
  with_entropy: bool = False,
) -> tuple[jax.Array, jax.Array | None]:
  """`token_logp` (and `token_entropy`) without the whole [B, L, V] logits.

  `project` maps final hidden states [B, C, D] to logits [B, C, V] (the
  vocabulary projection, closing over its weights); the positions run in
  chunks of `chunk_len` (`map_position_chunks`), so the forward and the
  backward pass (which recomputes each chunk's logits) hold one
  [B, chunk_len, V] block at a time. Equal to
  `token_logp_and_entropy(project(hidden), tokens)` up to float
  summation order.
  """
  if tokens_BxL.shape != hidden_BxLxD.shape[:2] or hidden_BxLxD.ndim != 3:
    raise LossShapeError(
      f"hidden {hidden_BxLxD.shape} and tokens {tokens_BxL.shape} must be "
      "[B, L, D] and [B, L]"
    )

  def one(next_BxC, h_BxCxD):
    logp_BxCxV = jax.nn.log_softmax(
      project(h_BxCxD).astype(jnp.float32), axis=-1
    )
    terms = {"logp": _picked(logp_BxCxV, next_BxC)}
    if with_entropy:
      terms["entropy"] = _entropy(logp_BxCxV)
    return terms

  terms = map_position_chunks(
    one, chunk_len, next_tokens(tokens_BxL), hidden_BxLxD
  )
  return terms["logp"], terms.get("entropy")


def _picked(logp_XxV: jax.Array, tokens_X: jax.Array) -> jax.Array:
  return jnp.take_along_axis(logp_XxV, tokens_X[..., None], axis=-1)[..., 0]


def _entropy(logp_XxV: jax.Array) -> jax.Array:
  # p log p -> 0 as p -> 0, but exp(-inf) * -inf is NaN (a -inf logit, e.g.
  # a masked-out vocabulary entry), so those terms are taken as 0.
  finite_logp_XxV = jnp.where(jnp.isfinite(logp_XxV), logp_XxV, 0.0)
  return -jnp.sum(jnp.exp(logp_XxV) * finite_logp_XxV, axis=-1)


# ---------------------------------------------------------------------------
# Aggregation.


def aggregate(
  values_BxL: jax.Array,
  mask_BxL: jax.Array,
  mode: AggMode = "token-mean",
  norm_length: int | None = None,
) -> jax.Array:
  """Reduces per-token values to a scalar over the masked tokens.

  * `token-mean`: sum(v * m) / sum(m) over the whole batch (long sequences
    weigh more).
  * `seq-mean-token-sum`: per row sum(v * m), then the mean over rows.
  * `seq-mean-token-mean`: per row mean over its tokens, then the mean over
    rows (GRPO's original form; every sequence weighs the same).
  * `seq-mean-token-sum-norm`: per row sum(v * m) / norm_length, then the mean
    over rows (Dr.GRPO: a constant denominator removes the length bias).
    `norm_length` defaults to L, the padded length; set it to the run's
    generation budget so the scale does not change with the length bucket
    (the training loop sets its longest bucket, `loop.rl_loss_config`).

  "Rows" are the rows with at least one masked-in token, so all-padding rows
  that `pack(batch_size=...)` adds do not dilute the mean. Empty inputs give 0
  rather than NaN.
  """
  if mode not in AGG_MODES:
    raise LossConfigError(f"unknown aggregation {mode!r}; one of {AGG_MODES}")
  mask_BxL = mask_BxL.astype(jnp.float32)
  masked_BxL = values_BxL * mask_BxL
  if mode == "token-mean":
    return jnp.sum(masked_BxL) / jnp.maximum(jnp.sum(mask_BxL), 1.0)
  count_B = jnp.sum(mask_BxL, axis=-1)
  row_sum_B = jnp.sum(masked_BxL, axis=-1)
  if mode == "seq-mean-token-sum":
    row_B = row_sum_B
  elif mode == "seq-mean-token-mean":
    row_B = row_sum_B / jnp.maximum(count_B, 1.0)
  else:
    length = values_BxL.shape[-1] if norm_length is None else norm_length
    if length <= 0:
      raise LossConfigError(f"norm_length must be positive, got {length}")
    row_B = row_sum_B / length
  valid_B = (count_B > 0).astype(jnp.float32)
  return jnp.sum(row_B * valid_B) / jnp.maximum(jnp.sum(valid_B), 1.0)


def masked_mean(values_BxL: jax.Array, mask_BxL: jax.Array) -> jax.Array:
  """Token mean over the mask; 0 when the mask is empty."""
  return aggregate(values_BxL, mask_BxL, "token-mean")


# ---------------------------------------------------------------------------
# KL to a reference policy.


def kl_penalty(
  logp_BxL: jax.Array, ref_logp_BxL: jax.Array, estimator: KlEstimator = "k3"
) -> jax.Array:
  """Per-token estimate of KL(pi || pi_ref) from samples of pi.

  With r = ref_logp - logp (Schulman, "Approximating KL divergence", 2020):
    k1 = -r                 unbiased, high variance, can be negative
    k2 = r**2 / 2           biased, low variance, always >= 0
    k3 = exp(r) - r - 1     unbiased, low variance, always >= 0

  Those are properties of the value. As a loss term, differentiated
  through logp on tokens sampled from pi (as `policy_loss` uses it), the
  expected gradients are (`test_kl_loss_gradient_in_expectation`):
    k1: 0 (the score function's mean), so the term only adds noise;
    k2: the gradient of KL(pi || pi_ref), the reverse KL it estimates;
    k3: the gradient of the *forward* KL(pi_ref || pi) (mass-covering);
        a sampled token's is (1 - pi_ref / pi) grad logp, large on the rare
        sampled tokens the policy has made much less likely than the
        reference did: where a large `kl_coef` meets clipped gradients.
  """
  r_BxL = ref_logp_BxL - logp_BxL
  if estimator == "k1":
    return -r_BxL
  if estimator == "k2":
    return 0.5 * jnp.square(r_BxL)
  if estimator == "k3":
    return jnp.exp(r_BxL) - r_BxL - 1.0
  raise LossConfigError(
    f"unknown KL estimator {estimator!r}; one of {KL_ESTIMATORS}"
  )


# ---------------------------------------------------------------------------
# Clipped policy-gradient objective.


@dataclasses.dataclass(frozen=True)
class PolicyLossConfig:
  """Static hyper-parameters of `policy_loss` (hashable, so jit-static).

  The ratio is clipped to [1 - clip_low, 1 + clip_high]; a larger clip_high
  than clip_low is DAPO's "clip-higher". `clip_c` (> 1) enables dual clip
  (Ye et al. 2020, "Mastering Complex Control in MOBA Games"): for negative
  advantages the per-token loss is capped at -adv * clip_c, so a huge ratio
  on a bad action cannot blow up the update. `kl_coef` > 0 needs reference
  log-probs; `entropy_coef` > 0 needs entropies.

  `ratio_level` is the unit the importance ratio is taken over:
    * `token` (PPO): r_t = pi(y_t) / pi_old(y_t), clipped token by token.
    * `sequence` (GSPO; Zheng et al. 2025, "Group Sequence Policy
      Optimization"): every trained token of a row shares the length-
      normalised sequence ratio s = exp(mean_t log r_t), and the clip keeps
      or drops the row whole. The GSPO-token form is used: the value is s,
      the gradient s * grad log pi(y_t), so advantages may still vary per
      token (per turn, here).
    * `turn`: the same over each turn's action tokens, the unit an agent
      acts in (turn-level importance sampling, proposed for multi-turn
      agent training). Needs the batch's turn ids.
  The geometric mean shrinks the spread of the ratio, so GSPO pairs it with
  clip ranges hundreds of times smaller than PPO's (3e-4 / 4e-4 in the
  paper).
  On-policy (r_t = 1) the three give the same loss and gradient.

  Teacher guidance (on-policy distillation): `teacher_coef` > 0 adds
  teacher_coef * agg(D(teacher || student)) on the student's own sampled
  tokens, D being `token_divergence(teacher_divergence, teacher_temperature,
  teacher_beta)` over the whole vocabulary at each position; it needs the
  per-token divergences. `pg_coef` weighs the policy-gradient term: 0 with a
  teacher is pure on-policy distillation (GKD with lambda = 1), 1 is RL
  with a teacher term, as the KL term is RL with a reference.
  """

  clip_low: float = 0.2
  clip_high: float = 0.2
  clip_c: float | None = None
  kl_coef: float = 0.0
  kl_estimator: KlEstimator = "k3"
  entropy_coef: float = 0.0
  agg: AggMode = "token-mean"
  norm_length: int | None = None
  ratio_level: RatioLevel = "token"
  pg_coef: float = 1.0
  teacher_coef: float = 0.0
  teacher_divergence: Divergence = "reverse_kl"
  teacher_temperature: float = 1.0
  teacher_beta: float = 0.5

  def __post_init__(self):
    for name in (
      "clip_low", "clip_high", "clip_c", "kl_coef", "entropy_coef", "pg_coef",
      "teacher_coef", "teacher_temperature", "teacher_beta",
    ):  # fmt: skip
      value = getattr(self, name)
      if name == "clip_c" and value is None:
        continue  # no dual clip
      # clip_high = inf is a one-sided clip; NaN or inf elsewhere poisons
      # every loss (a NaN compares False with every bound below).
      if not is_real(value, allow_inf=name == "clip_high"):
        raise LossConfigError(f"{name} must be a real number, got {value!r}")
    if self.pg_coef < 0.0 or self.teacher_coef < 0.0:
      raise LossConfigError(
        f"pg_coef ({self.pg_coef}) and teacher_coef ({self.teacher_coef}) "
        "must be >= 0"
      )
    if self.pg_coef == 0.0 and self.teacher_coef == 0.0:
      raise LossConfigError(
        "pg_coef = 0 needs teacher_coef > 0: nothing else drives the policy"
      )
    check_divergence(
      self.teacher_divergence, self.teacher_temperature, self.teacher_beta
    )
    if not 0.0 <= self.clip_low < 1.0:
      raise LossConfigError(f"clip_low must be in [0, 1), got {self.clip_low}")
    if self.clip_high < 0.0:
      raise LossConfigError(f"clip_high must be >= 0, got {self.clip_high}")
    if self.clip_c is not None and self.clip_c <= 1.0:
      raise LossConfigError(
        f"clip_c must be > 1 (dual clip), got {self.clip_c}"
      )
    if self.kl_estimator not in KL_ESTIMATORS:
      raise LossConfigError(
        f"unknown KL estimator {self.kl_estimator!r}; one of {KL_ESTIMATORS}"
      )
    if self.agg not in AGG_MODES:
      raise LossConfigError(
        f"unknown aggregation {self.agg!r}; one of {AGG_MODES}"
      )
    if self.norm_length is not None and self.norm_length <= 0:
      raise LossConfigError(
        f"norm_length must be positive, got {self.norm_length}"
      )
    if self.kl_coef < 0.0:
      raise LossConfigError(f"kl_coef must be >= 0, got {self.kl_coef}")
    if self.ratio_level not in RATIO_LEVELS:
      raise LossConfigError(
        f"unknown ratio_level {self.ratio_level!r}; one of {RATIO_LEVELS}"
      )


def clipped_pg_loss(
  logp_BxL: jax.Array,
  old_logp_BxL: jax.Array,
  adv_BxL: jax.Array,
  clip_low: float,
  clip_high: float,
  clip_c: float | None = None,
) -> tuple[jax.Array, jax.Array]:
  """Per-token PPO loss max(-A r, -A clip(r)) (+ dual clip); and the ratio.

  The log-ratio is clamped to +-MAX_LOG_RATIO before exp so one wildly
  off-policy token cannot overflow the loss to inf; that far out the clip
  has already zeroed the gradient in all but the unbounded case.
  """
  log_ratio_BxL = jnp.clip(
    logp_BxL - old_logp_BxL, -MAX_LOG_RATIO, MAX_LOG_RATIO
  )
  ratio_BxL = jnp.exp(log_ratio_BxL)
  unclipped_BxL = -adv_BxL * ratio_BxL
  clipped_BxL = -adv_BxL * jnp.clip(ratio_BxL, 1.0 - clip_low, 1.0 + clip_high)
  loss_BxL = jnp.maximum(unclipped_BxL, clipped_BxL)
  if clip_c is not None:
    dual_BxL = jnp.minimum(loss_BxL, -adv_BxL * clip_c)
    loss_BxL = jnp.where(adv_BxL < 0, dual_BxL, loss_BxL)
  return loss_BxL, ratio_BxL


def segment_mean(
  x_BxL: jax.Array, mask_BxL: jax.Array, segment_BxL: jax.Array
) -> jax.Array:
  """Each token's mean of `x_BxL` over the masked tokens of its segment.

  Segments are the runs of one `segment_BxL` value within a row (e.g. turn
  ids; all zeros for the whole row). Masked-out tokens join no mean and get
  the mean of their segment's masked tokens (0 if it has none).
  """
  b, l = x_BxL.shape
  # A segment id is < L (turn ids are), so b * L + id is unique per row.
  ids_BxL = jnp.arange(b)[:, None] * l + jnp.clip(segment_BxL, 0, l - 1)
  w_BxL = mask_BxL.astype(jnp.float32)
  sums = jax.ops.segment_sum((x_BxL * w_BxL).ravel(), ids_BxL.ravel(), b * l)
  counts = jax.ops.segment_sum(w_BxL.ravel(), ids_BxL.ravel(), b * l)
  return (sums / jnp.maximum(counts, 1.0))[ids_BxL]


def level_logp(
  logp_BxL: jax.Array,
  old_logp_BxL: jax.Array,
  mask_BxL: jax.Array,
  level: RatioLevel,
  turn_id_BxL: jax.Array | None = None,
) -> jax.Array:
  """Log-probs whose ratio to `old_logp_BxL` is the `level` ratio.

  For `turn` / `sequence` the value of logp - old is the mean log-ratio of
  the token's turn / row (GSPO's length-normalised ratio), while the
  gradient is that of logp itself: sg(mean) + logp - sg(logp), so that
  d ratio_t / d logp_t = ratio_t, as in GSPO-token.
  """
  if level == "token":
    return logp_BxL
  if level == "turn":
    if turn_id_BxL is None:
      raise LossConfigError("ratio_level='turn' needs turn_id_BxL")
    segment_BxL = turn_id_BxL
  elif level == "sequence":
    segment_BxL = jnp.zeros(logp_BxL.shape, jnp.int32)
  else:
    raise LossConfigError(
      f"unknown ratio_level {level!r}; one of {RATIO_LEVELS}"
    )
  logp_sg_BxL = jax.lax.stop_gradient(logp_BxL)
  mean_BxL = segment_mean(logp_sg_BxL - old_logp_BxL, mask_BxL, segment_BxL)
  return old_logp_BxL + mean_BxL + (logp_BxL - logp_sg_BxL)


def policy_loss(
  logp_BxL: jax.Array,
  old_logp_BxL: jax.Array,
  adv_BxL: jax.Array,
  loss_mask_BxL: jax.Array,
  config: PolicyLossConfig,
  *,
  ref_logp_BxL: jax.Array | None = None,
  entropy_BxL: jax.Array | None = None,
  teacher_div_BxL: jax.Array | None = None,
  turn_id_BxL: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
  """pg_coef * clipped PG loss + kl_coef * KL - entropy_coef * entropy
  + teacher_coef * divergence from a teacher, each aggregated.

  The PG ratio is taken at `config.ratio_level` (`turn` reads
  `turn_id_BxL`); the ratio and clip metrics report that ratio.

  Every term uses `config.agg` over `loss_mask_BxL`, so a token outside the
  mask (observation, prompt, padding) receives exactly zero gradient.

  Metrics. Aggregated with `config.agg` over the mask, like the loss terms
  they are: pg_loss, kl (the configured estimator, to the reference),
  teacher_div (the divergence from the teacher), entropy. Token means over
  the mask: approx_kl (k3 estimate of KL(pi_old || pi) from the per-token
  ratio whatever `ratio_level`: how far the update moved), clip_frac_low
  (A < 0 and r < 1 - clip_low: the lower clip zeroes the gradient),
  clip_frac_high (A > 0 and r > 1 + clip_high), dual_clip_frac (A < 0 and
  r > clip_c), ratio_mean. ratio_max / ratio_min: over the masked tokens.
  loss: the total objective.
  """
  _check_same_shape(
    logp_BxL=logp_BxL,
    old_logp_BxL=old_logp_BxL,
    adv_BxL=adv_BxL,
    loss_mask_BxL=loss_mask_BxL,
    ref_logp_BxL=ref_logp_BxL,
    entropy_BxL=entropy_BxL,
    teacher_div_BxL=teacher_div_BxL,
    turn_id_BxL=turn_id_BxL,
  )
  if config.teacher_coef > 0 and teacher_div_BxL is None:
    raise LossConfigError("teacher_coef > 0 needs teacher_div_BxL")
  if config.kl_coef > 0 and ref_logp_BxL is None:
    raise LossConfigError("kl_coef > 0 needs ref_logp_BxL")
  if config.entropy_coef != 0 and entropy_BxL is None:
    raise LossConfigError("entropy_coef != 0 needs entropy_BxL")

  mask_BxL = loss_mask_BxL.astype(jnp.float32)
  on_BxL = mask_BxL > 0
  # Masked positions may hold garbage (e.g. behaviour logp 0 at padding);
  # zero them before exp so a huge ratio there cannot make NaN * 0.
  logp_sg_BxL = jax.lax.stop_gradient(logp_BxL)
  old_logp_BxL = jnp.where(on_BxL, old_logp_BxL, logp_sg_BxL)
  adv_BxL = jnp.where(on_BxL, adv_BxL, 0.0)

  def agg(v_BxL: jax.Array) -> jax.Array:
    return aggregate(v_BxL, mask_BxL, config.agg, config.norm_length)

  pg_BxL, ratio_BxL = clipped_pg_loss(
    level_logp(
      logp_BxL, old_logp_BxL, mask_BxL, config.ratio_level, turn_id_BxL
    ),
    old_logp_BxL,
    adv_BxL,
    config.clip_low,
    config.clip_high,
    config.clip_c,
  )
  pg_loss = agg(pg_BxL)
  loss = config.pg_coef * pg_loss
  metrics: dict[str, jax.Array] = {"pg_loss": pg_loss}
  if teacher_div_BxL is not None:
    teacher_div = agg(jnp.where(on_BxL, teacher_div_BxL, 0.0))
    metrics["teacher_div"] = teacher_div
    loss = loss + config.teacher_coef * teacher_div

  if ref_logp_BxL is not None:
    ref_logp_BxL = jnp.where(on_BxL, ref_logp_BxL, logp_sg_BxL)
    kl = agg(kl_penalty(logp_BxL, ref_logp_BxL, config.kl_estimator))
    metrics["kl"] = kl
    if config.kl_coef > 0:
      loss = loss + config.kl_coef * kl
  if entropy_BxL is not None:
    entropy = agg(entropy_BxL)
    metrics["entropy"] = entropy
    if config.entropy_coef != 0:
      loss = loss - config.entropy_coef * entropy

  ratio_sg_BxL = jax.lax.stop_gradient(ratio_BxL)
  adv_sg_BxL = jax.lax.stop_gradient(adv_BxL)
  low_BxL = (adv_sg_BxL < 0) & (ratio_sg_BxL < 1.0 - config.clip_low)
  high_BxL = (adv_sg_BxL > 0) & (ratio_sg_BxL > 1.0 + config.clip_high)
  metrics["clip_frac_low"] = masked_mean(low_BxL, mask_BxL)
  metrics["clip_frac_high"] = masked_mean(high_BxL, mask_BxL)
  if config.clip_c is not None:
    dual_BxL = (adv_sg_BxL < 0) & (ratio_sg_BxL > config.clip_c)
    metrics["dual_clip_frac"] = masked_mean(dual_BxL, mask_BxL)
  # k3 of KL(pi_old || pi) from the behaviour samples: r - 1 - log r, with
  # the per-token r whatever `ratio_level` (a turn or sequence ratio is a
  # geometric mean, which would hide how far single tokens moved).
  log_ratio_BxL = logp_sg_BxL - old_logp_BxL
  token_ratio_BxL = jnp.exp(
    jnp.clip(log_ratio_BxL, -MAX_LOG_RATIO, MAX_LOG_RATIO)
  )
  metrics["approx_kl"] = masked_mean(
    token_ratio_BxL - 1.0 - log_ratio_BxL, mask_BxL
  )
  metrics["ratio_mean"] = masked_mean(ratio_sg_BxL, mask_BxL)
  any_on = jnp.any(on_BxL)
  metrics["ratio_max"] = jnp.where(
    any_on, jnp.max(jnp.where(on_BxL, ratio_sg_BxL, -jnp.inf)), 1.0
  )
  metrics["ratio_min"] = jnp.where(
    any_on, jnp.min(jnp.where(on_BxL, ratio_sg_BxL, jnp.inf)), 1.0
  )
  metrics["loss"] = loss
  return loss, metrics


# ---------------------------------------------------------------------------
# The critic's regression loss (PPO with a value model).


def value_loss(
  value_BxL: jax.Array,
  old_value_BxL: jax.Array,
  target_BxL: jax.Array,
  mask_BxL: jax.Array,
  clip: float = 0.0,
) -> tuple[jax.Array, dict[str, jax.Array]]:
  """0.5 * token-mean of the squared error to `target_BxL` over the mask.

  With `clip` > 0, PPO's value clipping: the prediction may move at most
  `clip` from the value the advantages were computed with
  (`old_value_BxL`) before the error stops improving, and the larger of
  the clipped and unclipped errors counts (Schulman et al. 2017; verl's
  `cliprange_value`). `clip_frac` is the share of masked positions where
  the clipped error was the larger.
  """
  _check_same_shape(
    value_BxL=value_BxL,
    old_value_BxL=old_value_BxL,
    target_BxL=target_BxL,
    mask_BxL=mask_BxL,
  )
  if clip < 0:
    raise LossConfigError(f"value clip must be >= 0 (0 = off): {clip}")
  err_BxL = jnp.square(value_BxL - target_BxL)
  if clip > 0:
    moved_BxL = old_value_BxL + jnp.clip(value_BxL - old_value_BxL, -clip, clip)
    clipped_BxL = jnp.square(moved_BxL - target_BxL)
    clip_frac = masked_mean(
      (clipped_BxL > err_BxL).astype(jnp.float32), mask_BxL
    )
    err_BxL = jnp.maximum(err_BxL, clipped_BxL)
  else:
    clip_frac = jnp.zeros((), jnp.float32)
  loss = 0.5 * masked_mean(err_BxL, mask_BxL)
  return loss, {
    "value_loss": loss,
    "value_clip_frac": clip_frac,
    "value_mean": masked_mean(value_BxL, mask_BxL),
  }


# ---------------------------------------------------------------------------
# Supervised and preference losses (same masks, same alignment).


def sft_loss(
  logp_BxL: jax.Array,
  loss_mask_BxL: jax.Array,
  agg: AggMode = "token-mean",
  norm_length: int | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
  """Cross-entropy (negative log-likelihood) on the loss-mask tokens."""
  _check_same_shape(logp_BxL=logp_BxL, loss_mask_BxL=loss_mask_BxL)
  nll = aggregate(-logp_BxL, loss_mask_BxL, agg, norm_length)
  tokens = jnp.sum(loss_mask_BxL.astype(jnp.float32))
  token_nll = masked_mean(-logp_BxL, loss_mask_BxL)
  return nll, {
    "loss": nll,
    "nll_per_token": token_nll,
    "perplexity": jnp.exp(token_nll),
    "tokens": tokens,
  }


def sequence_logp(logp_BxL: jax.Array, loss_mask_BxL: jax.Array) -> jax.Array:
  """Sum of log-probs over each row's loss-mask tokens: log pi(response)."""
  return jnp.sum(logp_BxL * loss_mask_BxL.astype(logp_BxL.dtype), axis=-1)


def dpo_loss(
  chosen_logp_B: jax.Array,
  rejected_logp_B: jax.Array,
  ref_chosen_logp_B: jax.Array,
  ref_rejected_logp_B: jax.Array,
  beta: float = 0.1,
  label_smoothing: float = 0.0,
  pair_mask_B: jax.Array | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
  """DPO (Rafailov et al. 2023) on sequence log-probs.

  margin = beta * ((pi_c - ref_c) - (pi_r - ref_r));
  loss = -(1 - eps) log sigmoid(margin) - eps log sigmoid(-margin), the
  conservative-DPO label smoothing (eps = 0 is plain DPO). `pair_mask_B`
  drops padding pairs from the mean.
  """
  if beta <= 0:
    raise LossConfigError(f"DPO beta must be > 0, got {beta}")
  if not 0.0 <= label_smoothing < 0.5:
    raise LossConfigError(
      f"label_smoothing must be in [0, 0.5), got {label_smoothing}"
    )
  shapes = {
    tuple(x.shape)
    for x in (chosen_logp_B, rejected_logp_B, ref_chosen_logp_B)
    + (ref_rejected_logp_B,)
  }
  if len(shapes) != 1 or len(next(iter(shapes))) != 1:
    raise LossShapeError(f"DPO inputs must share one [B] shape, got {shapes}")
  if pair_mask_B is None:
    pair_mask_B = jnp.ones_like(chosen_logp_B)
  pair_mask_B = pair_mask_B.astype(jnp.float32)
  chosen_reward_B = beta * (chosen_logp_B - ref_chosen_logp_B)
  rejected_reward_B = beta * (rejected_logp_B - ref_rejected_logp_B)
  margin_B = chosen_reward_B - rejected_reward_B
  loss_B = -(1.0 - label_smoothing) * jax.nn.log_sigmoid(
    margin_B
  ) - label_smoothing * jax.nn.log_sigmoid(-margin_B)
  n = jnp.maximum(jnp.sum(pair_mask_B), 1.0)

  def mean(x_B: jax.Array) -> jax.Array:
    return jnp.sum(x_B * pair_mask_B) / n

  loss = mean(loss_B)
  return loss, {
    "loss": loss,
    "reward_chosen": mean(chosen_reward_B),
    "reward_rejected": mean(rejected_reward_B),
    "reward_margin": mean(margin_B),
    "reward_accuracy": mean((margin_B > 0).astype(jnp.float32)),
  }


# ---------------------------------------------------------------------------
# Distillation: token-level divergence from a teacher's distributions.


def is_real(value, allow_inf: bool = False) -> bool:
  """A real number (not a bool), finite unless `allow_inf`; never NaN: what
  a loss setting must be (NaN compares False with every bound)."""
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    return False
  return not math.isnan(value) and (allow_inf or math.isfinite(value))


def check_divergence(kind: str, temperature: float, beta: float) -> None:
  """Raises `LossConfigError` for settings `token_divergence` rejects."""
  if kind not in DIVERGENCES:
    raise LossConfigError(f"unknown divergence {kind!r}; one of {DIVERGENCES}")
  if not is_real(temperature) or temperature <= 0:
    raise LossConfigError(
      f"temperature must be a finite number > 0, got {temperature}"
    )
  if kind == "jsd" and not (is_real(beta) and 0.0 < beta < 1.0):
    raise LossConfigError(f"jsd beta must be in (0, 1), got {beta}")


def check_distill_coefs(kd_coef: float, sft_coef: float) -> None:
  """Raises `LossConfigError` unless both are finite, >= 0 and not both 0."""
  finite = is_real(kd_coef) and is_real(sft_coef)
  if not finite or kd_coef < 0 or sft_coef < 0 or kd_coef + sft_coef <= 0:
    raise LossConfigError(
      f"kd_coef ({kd_coef}) and sft_coef ({sft_coef}) must be >= 0 and not "
      "both 0"
    )


def token_divergence(
  student_logits_BxLxV: jax.Array,
  teacher_logits_BxLxV: jax.Array,
  kind: Divergence = "forward_kl",
  temperature: float = 1.0,
  beta: float = 0.5,
) -> jax.Array:
  """Per-token divergence between teacher (p) and student (q) next-token
  distributions, aligned like `token_logp` (entry t compares the two
  distributions over token t; 0 at t = 0). Both softened by `temperature`.

  * `forward_kl`: KL(p || q) = sum_v p (log p - log q). Hinton et al.
    (2015) knowledge distillation; covers every mode of the teacher.
  * `reverse_kl`: KL(q || p). Mode-seeking; the divergence of MiniLLM
    (Gu et al. 2024) and of on-policy distillation.
  * `jsd`: the generalized Jensen-Shannon divergence of GKD (Agarwal et al.
    2024), beta KL(p || m) + (1 - beta) KL(q || m) with
    m = beta p + (1 - beta) q; bounded, 0 < beta < 1.

  Teacher logits carry no gradient. Returned values are scaled by
  temperature**2 so gradient sizes do not shrink with the temperature
  (Hinton et al.).
  """
  check_divergence(kind, temperature, beta)
  if student_logits_BxLxV.shape != teacher_logits_BxLxV.shape:
    raise LossShapeError(
      f"student logits {student_logits_BxLxV.shape} and teacher logits "
      f"{teacher_logits_BxLxV.shape} must have one [B, L, V] shape (same "
      "vocabulary)"
    )
  if student_logits_BxLxV.ndim != 3:
    raise LossShapeError(
      f"logits must be [B, L, V], got {student_logits_BxLxV.shape}"
    )

  def log_softmax(logits_BxLxV: jax.Array) -> jax.Array:
    x_BxMxV = logits_BxLxV[:, :-1].astype(jnp.float32) / temperature
    return jax.nn.log_softmax(x_BxMxV, axis=-1)

  logq_BxMxV = log_softmax(student_logits_BxLxV)
  logp_BxMxV = jax.lax.stop_gradient(log_softmax(teacher_logits_BxLxV))
  div_BxM = _divergence(logq_BxMxV, logp_BxMxV, kind, beta)
  return _shift_right(div_BxM * temperature**2)


def _divergence(
  logq_XxV: jax.Array, logp_XxV: jax.Array, kind: Divergence, beta: float
) -> jax.Array:
  """`kind` between teacher p and student q from their log-probs [..., V]."""

  def kl(loga_XxV: jax.Array, logb_XxV: jax.Array) -> jax.Array:
    # xlogy-style: a term with a = 0 is 0 even where log b = -inf.
    a_XxV = jnp.exp(loga_XxV)
    terms = jnp.where(a_XxV > 0, a_XxV * (loga_XxV - logb_XxV), 0.0)
    return jnp.sum(terms, axis=-1)

  if kind == "forward_kl":
    return kl(logp_XxV, logq_XxV)
  if kind == "reverse_kl":
    return kl(logq_XxV, logp_XxV)
  logm_XxV = jnp.logaddexp(
    jnp.log(beta) + logp_XxV, jnp.log1p(-beta) + logq_XxV
  )
  return beta * kl(logp_XxV, logm_XxV) + (1.0 - beta) * kl(logq_XxV, logm_XxV)


def chunked_distill_terms(
  student_hidden_BxLxD: jax.Array,
  teacher_hidden_BxLxD: jax.Array,
  tokens_BxL: jax.Array,
  student_project: Callable[[jax.Array], jax.Array],
  teacher_project: Callable[[jax.Array], jax.Array],
  chunk_len: int,
  kind: Divergence = "forward_kl",
  temperature: float = 1.0,
  beta: float = 0.5,
  with_entropy: bool = False,
) -> dict[str, jax.Array]:
  """Distillation's per-token terms, `chunk_len` positions at a time.

  From the student's and the teacher's final hidden states and vocabulary
  projections (as in `chunked_token_logp`): "logp" (the student's
  `token_logp`), "divergence" (`token_divergence`), "agreement"
  (`top1_agreement`) and, `with_entropy`, "entropy" (`token_entropy`),
  each [B, L] and equal to those functions on whole logits; neither
  model's [B, L, V] logits are ever held whole. The teacher gets no
  gradient.
  """
  check_divergence(kind, temperature, beta)

  def one(next_BxC, s_BxCxD, t_BxCxD):
    s_logits_BxCxV = student_project(s_BxCxD).astype(jnp.float32)
    t_logits_BxCxV = jax.lax.stop_gradient(
      teacher_project(t_BxCxD).astype(jnp.float32)
    )
    if s_logits_BxCxV.shape != t_logits_BxCxV.shape:
      raise LossShapeError(
        f"student logits {s_logits_BxCxV.shape} and teacher logits "
        f"{t_logits_BxCxV.shape} must have one shape (same vocabulary)"
      )
    logq_BxCxV = jax.nn.log_softmax(s_logits_BxCxV, axis=-1)
    terms = {
      "logp": _picked(logq_BxCxV, next_BxC),
      "divergence": temperature**2
      * _divergence(
        jax.nn.log_softmax(s_logits_BxCxV / temperature, axis=-1),
        jax.nn.log_softmax(t_logits_BxCxV / temperature, axis=-1),
        kind,
        beta,
      ),
      "agreement": (
        jnp.argmax(s_logits_BxCxV, -1) == jnp.argmax(t_logits_BxCxV, -1)
      ).astype(jnp.float32),
    }
    if with_entropy:
      terms["entropy"] = _entropy(logq_BxCxV)
    return terms

  return map_position_chunks(
    one,
    chunk_len,
    next_tokens(tokens_BxL),
    student_hidden_BxLxD,
    teacher_hidden_BxLxD,
  )


def top1_agreement(
  student_logits_BxLxV: jax.Array, teacher_logits_BxLxV: jax.Array
) -> jax.Array:
  """1.0 where both put their highest logit on the same next token (aligned
  like `token_logp`; 0 at t = 0)."""
  same_BxM = jnp.argmax(student_logits_BxLxV[:, :-1], -1) == jnp.argmax(
    teacher_logits_BxLxV[:, :-1], -1
  )
  return _shift_right(same_BxM.astype(jnp.float32))


def distill_loss(
  div_BxL: jax.Array,
  logp_BxL: jax.Array,
  loss_mask_BxL: jax.Array,
  kd_coef: float = 1.0,
  sft_coef: float = 0.0,
  agg: AggMode = "token-mean",
  norm_length: int | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
  """kd_coef * agg(divergence) + sft_coef * agg(-log q(token)), both over the
  loss-mask tokens (the actions; prompts and observations are context).

  With sft_coef > 0 the student also fits the sampled tokens themselves:
  for rejection-sampled teacher trajectories that is sequence-level
  distillation (Kim & Rush 2016), and `div_BxL` the token-level part.
  """
  check_distill_coefs(kd_coef, sft_coef)
  _check_same_shape(
    div_BxL=div_BxL, logp_BxL=logp_BxL, loss_mask_BxL=loss_mask_BxL
  )
  kd = aggregate(div_BxL, loss_mask_BxL, agg, norm_length)
  nll = aggregate(-logp_BxL, loss_mask_BxL, agg, norm_length)
  loss = kd_coef * kd + sft_coef * nll
  token_nll = masked_mean(-logp_BxL, loss_mask_BxL)
  return loss, {
    "loss": loss,
    "divergence": kd,
    "divergence_per_token": masked_mean(div_BxL, loss_mask_BxL),
    "nll_per_token": token_nll,
    "perplexity": jnp.exp(token_nll),
    "tokens": jnp.sum(loss_mask_BxL.astype(jnp.float32)),
  }
