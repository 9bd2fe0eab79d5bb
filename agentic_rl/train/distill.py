"""Distillation back into a (smaller) student policy.

The student trains on `TrajectoryBatch`es (typically the teacher's own
verified rollouts, `rollout.rejection`) with the same masks and alignment
as SFT and RL: on every action token it matches the teacher's next-token
distribution (`losses.token_divergence`) and, with `sft_coef` > 0, the
sampled token itself. Prompts and observations are context only.

The teacher runs inside the jitted step (a frozen `ModelState` argument,
laid out by its own shardings), so no [B, L, V] teacher logits are kept on
the host: memory is one extra forward pass, whatever the vocabulary. The
teacher and the student must share the tokenizer (same vocabulary size);
their widths, depths and heads may differ. With `kd_coef` = 0 (fitting the
kept tokens only) the teacher still runs, for the `top1_agreement` metric:
one teacher forward pass a step.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Collection
from typing import Any

import jax
from flax import nnx

from agentic_rl import losses
from agentic_rl.train.state import (
  Layout,
  ModelState,
  TrainState,
  check_known_keys,
)
from agentic_rl.train.step import (
  LOSS_WEIGHT,
  Metrics,
  StepConfig,
  agg_weight,
  jit_step,
  teacher_terms,
  update_step,
)
from agentic_rl.types import TrajectoryBatch


@dataclasses.dataclass(frozen=True)
class DistillConfig:
  """How the student matches the teacher (see `losses.token_divergence`)."""

  divergence: losses.Divergence = "forward_kl"
  temperature: float = 1.0
  beta: float = 0.5  # jsd only
  kd_coef: float = 1.0
  sft_coef: float = 0.0

  def __post_init__(self):
    losses.check_divergence(self.divergence, self.temperature, self.beta)
    losses.check_distill_coefs(self.kd_coef, self.sft_coef)

  @classmethod
  def from_dict(cls, d: Any, others: Collection[str] = ()) -> DistillConfig:
    """The fields of `d`; its keys named in `others` belong to the caller
    (e.g. the loop's `distill.teacher`). Any other key is a
    `losses.LossConfigError` naming it, so a typo cannot fall back to a
    default silently."""
    check_known_keys(cls, d, "distill", losses.LossConfigError, others)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in dict(d).items() if k in names})


def distill_loss_fn(
  model: nnx.Module,
  batch: TrajectoryBatch,
  teacher: ModelState,
  config: DistillConfig,
  agg: losses.AggMode = "token-mean",
  norm_length: int | None = None,
) -> tuple[jax.Array, Metrics]:
  """Student forward + teacher forward (no gradient) + `losses.distill_loss`."""
  terms = teacher_terms(
    model,
    teacher,
    batch.tokens_BxL,
    config.divergence,
    config.temperature,
    config.beta,
  )
  loss, metrics = losses.distill_loss(
    terms["divergence"],
    terms["logp"],
    batch.loss_mask_BxL,
    config.kd_coef,
    config.sft_coef,
    agg,
    norm_length,
  )
  # How often the student's top token is the teacher's (on action tokens).
  metrics["top1_agreement"] = losses.masked_mean(
    terms["agreement"], batch.loss_mask_BxL
  )
  metrics[LOSS_WEIGHT] = agg_weight(batch.loss_mask_BxL, agg)
  return loss, metrics


def distill_step(
  state: TrainState,
  teacher: ModelState,
  batch: TrajectoryBatch,
  config: StepConfig,
  distill: DistillConfig,
) -> tuple[TrainState, Metrics]:
  """One student update against a frozen teacher (pure)."""
  loss_fn = functools.partial(
    distill_loss_fn,
    teacher=teacher,
    config=distill,
    agg=config.loss.agg,
    norm_length=config.loss.norm_length,
  )
  return update_step(state, batch, loss_fn, config)


def make_distill_step(
  config: StepConfig,
  distill: DistillConfig,
  layout: Layout,
  teacher: ModelState,
  teacher_shardings: Any,
) -> Callable[[TrainState, TrajectoryBatch], tuple[TrainState, Metrics]]:
  """The jitted step `(state, batch) -> (state, metrics)` against `teacher`.

  `teacher` is an argument of the compiled step (not a constant folded into
  it), laid out by `teacher_shardings` (its train layout's `.state.model`);
  both layouts must use the same mesh. The student state is donated, the
  teacher is not.
  """
  return jit_step(
    functools.partial(distill_step, config=config, distill=distill),
    layout,
    teacher,
    teacher_shardings,
  )
