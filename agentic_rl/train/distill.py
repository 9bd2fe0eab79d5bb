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
from collections.abc import Callable
from typing import Any

import jax
from flax import nnx

from agentic_rl import losses
from agentic_rl import sharding as shd
from agentic_rl.train.state import Layout, ModelState, TrainState
from agentic_rl.train.step import (
  BatchShapeError,
  Metrics,
  StepConfig,
  update_step,
)
from agentic_rl.types import TrajectoryBatch


class DistillError(ValueError):
  """Teacher and student do not fit together (vocabulary, mesh)."""


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
  def from_dict(cls, d: Any) -> DistillConfig:
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
  student_BxLxV = model(batch.tokens_BxL)
  teacher_BxLxV = jax.lax.stop_gradient(teacher.merge()(batch.tokens_BxL))
  if student_BxLxV.shape[-1] != teacher_BxLxV.shape[-1]:
    raise DistillError(
      f"student vocabulary {student_BxLxV.shape[-1]} != teacher vocabulary "
      f"{teacher_BxLxV.shape[-1]}: distillation needs one tokenizer"
    )
  div_BxL = losses.token_divergence(
    student_BxLxV,
    teacher_BxLxV,
    config.divergence,
    config.temperature,
    config.beta,
  )
  logp_BxL = losses.token_logp(student_BxLxV, batch.tokens_BxL)
  loss, metrics = losses.distill_loss(
    div_BxL,
    logp_BxL,
    batch.loss_mask_BxL,
    config.kd_coef,
    config.sft_coef,
    agg,
    norm_length,
  )
  # How often the student's top token is the teacher's (on action tokens).
  agree_BxL = losses.top1_agreement(student_BxLxV, teacher_BxLxV)
  metrics["top1_agreement"] = losses.masked_mean(agree_BxL, batch.loss_mask_BxL)
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
  if teacher_shardings is not None:
    meshes = {
      s.mesh for s in jax.tree.leaves(teacher_shardings) if hasattr(s, "mesh")
    }
    if meshes and meshes != {layout.mesh}:
      raise DistillError("teacher and student must be laid out on one mesh")

  def traced(state: TrainState, teacher: ModelState, batch: TrajectoryBatch):
    with shd.use_rules(layout.mesh, layout.rules):
      return distill_step(state, teacher, batch, config, distill)

  jitted = jax.jit(
    traced,
    in_shardings=(layout.state, teacher_shardings, layout.data),
    out_shardings=(layout.state, layout.replicated),
    donate_argnums=0,
  )
  dp = layout.data_parallel_size

  def call(state: TrainState, batch: TrajectoryBatch):
    b = batch.tokens_BxL.shape[0]
    if b % dp:
      raise BatchShapeError(
        f"{b} rows do not split over {dp} data-parallel devices"
      )
    return jitted(state, teacher, jax.device_put(batch, layout.data))

  call.jitted = jitted
  return call
