"""Direct Preference Optimization on paired `TrajectoryBatch`es.

A pair is a chosen and a rejected trajectory for the same task (e.g. from
rejection sampling: a verified success against a failure). Sequence
log-probs sum the token log-probs over each row's `loss_mask_BxL`, so only
policy-emitted tokens count, exactly as in RL and SFT. The reference
log-probs are computed once, before training, with `reference_logps`.
The update is `step.update_step` with `dpo_loss_fn` plugged in.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from agentic_rl import losses
from agentic_rl.data.packing import (
  DEFAULT_LENGTH_BUCKETS,
  DEFAULT_TURN_BUCKETS,
  bucket,
  pack,
)
from agentic_rl.train.state import Layout, ModelState, TrainState
from agentic_rl.train.step import (
  LOSS_WEIGHT,
  Metrics,
  StepConfig,
  compute_logp,
  jit_step,
  update_step,
)
from agentic_rl.types import Trajectory, TrajectoryBatch


class PairError(ValueError):
  """Chosen and rejected batches do not line up."""


@dataclasses.dataclass(frozen=True)
class DpoConfig:
  """beta scales the implicit reward; label_smoothing is cDPO's epsilon.

  `sft_coef` > 0 adds that times the chosen side's per-token NLL (the
  chosen rows' loss-mask tokens, token mean), as in RPO / iterative
  reasoning preference optimization (Pang et al. 2024): plain DPO can widen
  the margin while pushing the chosen responses' likelihood down too.
  """

  beta: float = 0.1
  label_smoothing: float = 0.0
  sft_coef: float = 0.0

  def __post_init__(self):
    for name in ("beta", "label_smoothing", "sft_coef"):
      value = getattr(self, name)
      if not losses.is_real(value):
        raise losses.LossConfigError(
          f"DPO {name} must be a real number: {value!r}"
        )
    if self.beta <= 0:
      raise losses.LossConfigError(f"DPO beta must be > 0: {self.beta}")
    if not 0.0 <= self.label_smoothing < 0.5:
      raise losses.LossConfigError(
        f"label_smoothing must be in [0, 0.5): {self.label_smoothing}"
      )
    if self.sft_coef < 0:
      raise losses.LossConfigError(f"sft_coef must be >= 0: {self.sft_coef}")


@flax.struct.dataclass
class PreferencePairs:
  """Row b of `chosen` is preferred over row b of `rejected`.

  Both batches have the same [B, L] shape. Rows where either side has no
  loss-mask token (padding pairs) are left out of the loss.
  """

  chosen: TrajectoryBatch
  rejected: TrajectoryBatch
  ref_chosen_logp_B: jax.Array
  ref_rejected_logp_B: jax.Array


def pack_pairs(
  chosen: Sequence[Trajectory],
  rejected: Sequence[Trajectory],
  *,
  batch_size: int | None = None,
  length_buckets: Sequence[int] = DEFAULT_LENGTH_BUCKETS,
  turn_buckets: Sequence[int] = DEFAULT_TURN_BUCKETS,
) -> tuple[TrajectoryBatch, TrajectoryBatch]:
  """Packs both sides to one common (bucketed) length and turn count."""
  if len(chosen) != len(rejected):
    raise PairError(
      f"{len(chosen)} chosen vs {len(rejected)} rejected trajectories"
    )
  both = list(chosen) + list(rejected)
  if not both:
    raise PairError("pack_pairs needs at least one pair")
  l = bucket(max(t.num_tokens for t in both), length_buckets)
  t = bucket(max(max(len(x.turns) for x in both), 1), turn_buckets, "turns")
  kw = dict(length_buckets=(l,), turn_buckets=(t,), batch_size=batch_size)
  return pack(chosen, **kw), pack(rejected, **kw)


def _check_pair_shapes(
  chosen: TrajectoryBatch, rejected: TrajectoryBatch
) -> None:
  if chosen.tokens_BxL.shape != rejected.tokens_BxL.shape:
    raise PairError(
      f"chosen {chosen.tokens_BxL.shape} and rejected "
      f"{rejected.tokens_BxL.shape} must have the same [B, L] shape"
    )


def reference_logps(
  ref_model: ModelState,
  chosen: TrajectoryBatch,
  rejected: TrajectoryBatch,
  num_chunks: int = 1,
) -> tuple[jax.Array, jax.Array]:
  """Sequence log-probs of both sides under the frozen reference model."""
  _check_pair_shapes(chosen, rejected)
  out = []
  for side in (chosen, rejected):
    logp_BxL = compute_logp(ref_model, side.tokens_BxL, num_chunks)
    out.append(losses.sequence_logp(logp_BxL, side.loss_mask_BxL))
  return out[0], out[1]


def make_pairs(
  ref_model: ModelState,
  chosen: TrajectoryBatch,
  rejected: TrajectoryBatch,
) -> PreferencePairs:
  ref_c_B, ref_r_B = reference_logps(ref_model, chosen, rejected)
  return PreferencePairs(chosen, rejected, ref_c_B, ref_r_B)


def dpo_loss_fn(
  model: nnx.Module, pairs: PreferencePairs, config: DpoConfig
) -> tuple[jax.Array, Metrics]:
  """One forward pass over [chosen; rejected] rows, then `losses.dpo_loss`."""
  _check_pair_shapes(pairs.chosen, pairs.rejected)
  b = pairs.chosen.tokens_BxL.shape[0]
  tokens_2BxL = jnp.concatenate(
    [pairs.chosen.tokens_BxL, pairs.rejected.tokens_BxL]
  )
  mask_2BxL = jnp.concatenate(
    [pairs.chosen.loss_mask_BxL, pairs.rejected.loss_mask_BxL]
  )
  logp_2BxL, _ = model.token_logp(tokens_2BxL)
  seq_2B = losses.sequence_logp(logp_2BxL, mask_2BxL)
  has_tokens_2B = jnp.sum(mask_2BxL, axis=-1) > 0
  pair_mask_B = (has_tokens_2B[:b] & has_tokens_2B[b:]).astype(jnp.float32)
  loss, metrics = losses.dpo_loss(
    seq_2B[:b],
    seq_2B[b:],
    pairs.ref_chosen_logp_B,
    pairs.ref_rejected_logp_B,
    beta=config.beta,
    label_smoothing=config.label_smoothing,
    pair_mask_B=pair_mask_B,
  )
  chosen_nll = losses.masked_mean(-logp_2BxL[:b], mask_2BxL[:b])
  metrics["chosen_nll_per_token"] = chosen_nll
  if config.sft_coef:
    loss = loss + config.sft_coef * chosen_nll
    metrics["loss"] = loss
  # Microbatches weigh by their pairs (exact for the DPO term; the optional
  # NLL term is a token mean, so with microbatches it is approximate).
  metrics[LOSS_WEIGHT] = jnp.sum(pair_mask_B)
  return loss, metrics


def dpo_step(
  state: TrainState,
  pairs: PreferencePairs,
  config: StepConfig,
  dpo: DpoConfig,
) -> tuple[TrainState, Metrics]:
  """One DPO update (pure; jit it with `make_dpo_step`)."""
  loss_fn = functools.partial(dpo_loss_fn, config=dpo)
  return update_step(state, pairs, loss_fn, config)


def make_dpo_step(
  config: StepConfig, dpo: DpoConfig, layout: Layout
) -> Callable[[TrainState, PreferencePairs], tuple[TrainState, Metrics]]:
  """The jitted DPO step: `(state, pairs) -> (state, metrics)`."""
  return jit_step(functools.partial(dpo_step, config=config, dpo=dpo), layout)
