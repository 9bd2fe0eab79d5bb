"""Supervised fine-tuning (cold start, distillation) on `TrajectoryBatch`es.

Same batch format, masks and alignment as RL: cross-entropy on the
`loss_mask_BxL` tokens only (the policy's own actions), with observations
and prompts as context. The update is `step.update_step` with the SFT loss
plugged in; aggregation follows `StepConfig.loss.agg` (and `norm_length`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
from flax import nnx

from agentic_rl import losses
from agentic_rl.train.state import Layout, TrainState
from agentic_rl.train.step import (
  LOSS_WEIGHT,
  Metrics,
  StepConfig,
  agg_weight,
  jit_step,
  update_step,
)
from agentic_rl.types import TrajectoryBatch


def sft_loss_fn(
  model: nnx.Module,
  batch: TrajectoryBatch,
  agg: losses.AggMode = "token-mean",
  norm_length: int | None = None,
) -> tuple[jax.Array, Metrics]:
  """Forward pass + masked negative log-likelihood."""
  logp_BxL, _ = model.token_logp(batch.tokens_BxL)
  loss, metrics = losses.sft_loss(
    logp_BxL, batch.loss_mask_BxL, agg, norm_length
  )
  return loss, {**metrics, LOSS_WEIGHT: agg_weight(batch.loss_mask_BxL, agg)}


def sft_step(
  state: TrainState, batch: TrajectoryBatch, config: StepConfig
) -> tuple[TrainState, Metrics]:
  """One SFT update (pure; jit it with `make_sft_step`)."""
  loss_fn = functools.partial(
    sft_loss_fn, agg=config.loss.agg, norm_length=config.loss.norm_length
  )
  return update_step(state, batch, loss_fn, config)


def make_sft_step(
  config: StepConfig, layout: Layout
) -> Callable[[TrainState, TrajectoryBatch], tuple[TrainState, Metrics]]:
  """The jitted SFT step: `(state, batch) -> (state, metrics)`."""
  return jit_step(functools.partial(sft_step, config=config), layout)
