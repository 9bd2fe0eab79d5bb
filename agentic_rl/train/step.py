"""The update step, shared by RL, SFT, DPO and distillation; the host
minibatch loop.

One module-level pure function, `update_step(state, inputs, loss_fn,
config)`, does an optimizer update: it splits `inputs` into microbatches,
accumulates gradients in-graph with a `lax.scan`, clips, applies AdamW and
returns the new state and metrics. RL (`train_step`), SFT
(`agentic_rl.train.sft`) and DPO (`agentic_rl.train.dpo`) differ only in the
`loss_fn` they plug in: `loss_fn(model, microbatch) -> (loss, metrics)`.

`jit_step` jits such a step with explicit shardings (state from the
`Layout`, every input leaf split by rows over the data-parallel axes,
metrics replicated) and donates the state. The NNX idiom is documented in
`agentic_rl.train.state`: split/merge around a plain `jax.jit`. A frozen
teacher (distillation, on-policy distillation in RL) is one more argument
of the compiled step, on its own shardings, never donated. A step given as
a `functools.partial` of a module-level function with hashable arguments
(every step here) is jitted once per process for its layout: a second run
of the same config in one process (a test, a notebook, a warm start) skips
tracing and compiling it again.

Minibatches and epochs are a *host* loop (`run_epochs`) over calls of the
jitted step: each call is one optimizer update on one minibatch. We chose
the host loop over a `lax.scan` of minibatches because it lets the loop
check each step's loss (STYLE.md item 9) one step behind without stalling
the device, log per-update metrics, and keeps one compiled step for every
number of minibatches and epochs.

Gradient accumulation: a loss function reports the denominator of its
mean as the metric `LOSS_WEIGHT` (the trained tokens of a token mean, the
rows with tokens of a row mean; `agg_weight`), and the microbatches'
losses, gradients and metrics are averaged with those weights. The update
then equals the full-minibatch update, whatever the aggregation mode and
however the trained tokens fall into microbatches. A loss function that
reports no weight gets equal weights.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from agentic_rl import losses
from agentic_rl import sharding as shd
from agentic_rl.models import transformer
from agentic_rl.train.state import (
  Layout,
  ModelState,
  OptimizerConfig,
  TrainState,
  make_optimizer,
  make_schedule,
)
from agentic_rl.types import TrajectoryBatch

Metrics = dict[str, jax.Array]
LossFn = Callable[[nnx.Module, Any], tuple[jax.Array, Metrics]]
# The metric a loss function returns for the weight of its (micro)batch in
# gradient accumulation (see the module docstring); not logged.
LOSS_WEIGHT = "loss_weight"


class NonFiniteLossError(FloatingPointError):
  """The loss (or gradient norm) of an update was NaN or infinite.

  The offending update was not applied (see `update_step`). `state`, when
  set by `run_steps`, is the newest state (the donated input is gone), so it
  can still be checkpointed or inspected.
  """

  def __init__(self, step: int, metrics: dict[str, float], state: Any = None):
    self.step = step
    self.metrics = metrics
    self.state = state
    super().__init__(
      f"non-finite loss at train step {step}: loss={metrics.get('loss')}, "
      f"grad_norm={metrics.get('grad_norm')}"
    )


class BatchShapeError(ValueError):
  """A batch cannot be split as the step config asks."""


class DistillError(ValueError):
  """A teacher and its student do not fit together (vocabulary, mesh)."""


@dataclasses.dataclass(frozen=True)
class StepConfig:
  """Static settings of an update (hashable; closed over by jit)."""

  optimizer: OptimizerConfig = OptimizerConfig()
  loss: losses.PolicyLossConfig = losses.PolicyLossConfig()
  num_microbatches: int = 1
  # RL: the temperature the rollouts sampled at. The policy's log-probs in
  # the loss are those of logits / temperature, the distribution the
  # behaviour log-probs come from, so the importance ratio is 1 on-policy.
  sampling_temperature: float = 1.0

  def __post_init__(self):
    if not self.sampling_temperature > 0:
      raise losses.LossConfigError(
        f"sampling_temperature must be > 0: {self.sampling_temperature}"
      )
    if self.num_microbatches < 1:
      raise BatchShapeError(
        f"num_microbatches must be >= 1: {self.num_microbatches}"
      )


# ---------------------------------------------------------------------------
# The generic update.


def _rows(inputs: Any) -> int:
  sizes = {x.shape[0] for x in jax.tree.leaves(inputs)}
  if len(sizes) != 1:
    raise BatchShapeError(f"input leaves disagree on rows: {sorted(sizes)}")
  return sizes.pop()


def split_microbatches(inputs: Any, num: int) -> Any:
  """[B, ...] -> [num, B/num, ...], microbatch m taking rows m, m+num, ...

  Strided, not contiguous: rows are laid out over the data-parallel devices
  in contiguous blocks, so striding keeps every microbatch spread over all
  of them (no device idles while another does a whole microbatch).
  """
  b = _rows(inputs)
  if b % num:
    raise BatchShapeError(f"batch of {b} rows not divisible into {num} parts")

  def one(x: jax.Array) -> jax.Array:
    return x.reshape(b // num, num, *x.shape[1:]).swapaxes(0, 1)

  return jax.tree.map(one, inputs)


def agg_weight(mask_BxL: jax.Array, mode: losses.AggMode) -> jax.Array:
  """What `losses.aggregate(..., mask_BxL, mode)` divides by: the masked-in
  tokens for `token-mean`, the rows with at least one of them otherwise."""
  mask_BxL = mask_BxL > 0
  if mode == "token-mean":
    return jnp.sum(mask_BxL).astype(jnp.float32)
  return jnp.sum(jnp.any(mask_BxL, axis=-1)).astype(jnp.float32)


def _finite_or(new: Any, old: Any, ok: jax.Array) -> Any:
  return jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, old)


def update_step(
  state: TrainState,
  inputs: Any,
  loss_fn: LossFn,
  config: StepConfig,
) -> tuple[TrainState, Metrics]:
  """One optimizer update on `inputs` (a pytree of [B, ...] arrays).

  A non-finite loss or gradient leaves params, optimizer state and step
  unchanged (`metrics["finite"]` is 0) so the host guard can raise with a
  usable state in hand.
  """
  model = state.model

  def loss_of(params: nnx.State, micro: Any) -> tuple[jax.Array, Metrics]:
    return loss_fn(nnx.merge(model.graphdef, params, model.rest), micro)

  grad_fn = jax.value_and_grad(loss_of, has_aux=True)
  m = config.num_microbatches
  if m == 1:
    (loss, metrics), grads = grad_fn(model.params, inputs)
    metrics = dict(metrics)
    metrics.pop(LOSS_WEIGHT, None)
  else:
    micro = split_microbatches(inputs, m)

    def accumulate(acc: Any, mb: Any) -> tuple[Any, tuple[Any, ...]]:
      (mb_loss, mb_metrics), g = grad_fn(model.params, mb)
      mb_metrics = dict(mb_metrics)
      w = jnp.asarray(mb_metrics.pop(LOSS_WEIGHT, 1.0), jnp.float32)
      acc = jax.tree.map(lambda a, x: a + w * x, acc, g)
      return acc, (mb_loss, mb_metrics, w)

    zeros = jax.tree.map(jnp.zeros_like, model.params)
    grad_sum, (loss_M, metrics_M, w_M) = jax.lax.scan(accumulate, zeros, micro)
    # Weighted means; no weight at all (no trained token in the minibatch)
    # means a zero loss and gradient, as in one pass.
    total = jnp.sum(w_M)
    scale = jnp.where(total > 0, 1.0 / jnp.maximum(total, 1e-30), 0.0)
    grads = jax.tree.map(lambda g: g * scale.astype(g.dtype), grad_sum)
    loss = jnp.sum(w_M * loss_M) * scale
    metrics = jax.tree.map(lambda x: jnp.sum(w_M * x) * scale, metrics_M)

  grad_norm = optax.global_norm(grads)
  ok = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
  tx = make_optimizer(config.optimizer)
  updates, opt_state = tx.update(grads, state.opt_state, model.params)
  params = optax.apply_updates(model.params, updates)
  new_state = state.replace(
    model=model.replace(params=_finite_or(params, model.params, ok)),
    opt_state=_finite_or(opt_state, state.opt_state, ok),
    step=state.step + ok.astype(state.step.dtype),
  )
  metrics = dict(metrics)
  metrics.update(
    loss=loss,
    grad_norm=grad_norm,
    # 1 when `max_grad_norm` scaled this update's gradient down (averaged
    # over an RL step's updates, the fraction clipped).
    grad_clipped=(
      (grad_norm > config.optimizer.max_grad_norm).astype(jnp.float32)
      if config.optimizer.max_grad_norm is not None
      else jnp.zeros((), jnp.float32)
    ),
    update_norm=optax.global_norm(updates),
    learning_rate=make_schedule(config.optimizer)(
      schedule_count(state.opt_state, state.step)
    ),
    finite=ok.astype(jnp.float32),
    step=state.step,
  )
  return new_state, metrics


def schedule_count(opt_state: Any, default: jax.Array) -> jax.Array:
  """The optimizer's own update count, the one its schedule reads.

  It differs from `TrainState.step` whenever an optimizer starts fresh
  inside a run (RL after SFT, a DPO stage): the step keeps counting, the
  schedule's warmup starts again. `default` when no schedule is found.
  """
  for path, count in optax.tree_utils.tree_get_all_with_path(
    opt_state, "count"
  ):
    if getattr(path[-1], "tuple_name", None) == "ScaleByScheduleState":
      return count
  return default


def jit_step(
  step_fn: Callable[..., tuple[TrainState, Metrics]],
  layout: Layout,
  teacher: ModelState | None = None,
  teacher_shardings: Any = None,
) -> Callable[[TrainState, Any], tuple[TrainState, Metrics]]:
  """`jax.jit(step_fn)` with the layout's shardings; the state is donated.

  Sharding constraints inside the model (`sharding.constrain`) are active
  while tracing. The returned callable checks that the rows split evenly
  over the data-parallel devices before dispatching.

  With `teacher` (a frozen `ModelState`), `step_fn` is
  `(state, teacher, inputs)` and the teacher is an argument of every call
  of the compiled step (not a constant folded into it), laid out by
  `teacher_shardings` (its own train layout's `.state.model`, on the same
  mesh) and not donated.
  """
  if teacher is not None and teacher_shardings is not None:
    meshes = {
      s.mesh for s in jax.tree.leaves(teacher_shardings) if hasattr(s, "mesh")
    }
    if meshes and meshes != {layout.mesh}:
      raise DistillError("teacher and student must be laid out on one mesh")

  key = _step_key(step_fn, layout, teacher is not None, teacher_shardings)
  jitted = _JITTED.pop(key, None) if key is not None else None
  if jitted is None:
    jitted = _jit(step_fn, layout, teacher is not None, teacher_shardings)
  if key is not None:
    _JITTED[key] = jitted  # now the most recently used
    while len(_JITTED) > _JITTED_MAX:
      _JITTED.pop(next(iter(_JITTED)))  # the least recently used
  dp = layout.data_parallel_size
  frozen = () if teacher is None else (teacher,)

  @functools.wraps(step_fn)
  def call(state: TrainState, inputs: Any) -> tuple[TrainState, Metrics]:
    b = _rows(inputs)
    if b % dp:
      raise BatchShapeError(
        f"{b} rows do not split over {dp} data-parallel devices"
      )
    # A no-op when the rows already live in the layout (as `select_rows`
    # leaves them); otherwise one explicit transfer instead of a jit error.
    return jitted(state, *frozen, jax.device_put(inputs, layout.data))

  call.jitted = jitted  # for .lower() / cost analysis
  return call


# Jitted steps by `_step_key`, least recently used first; bounded because
# each holds its compiled executables.
_JITTED: dict[Any, Any] = {}
_JITTED_MAX = 16


def _tree_key(tree: Any) -> tuple[Any, ...]:
  leaves, treedef = jax.tree.flatten(tree)
  return treedef, tuple(leaves)


def _step_key(
  step_fn: Callable[..., Any],
  layout: Layout,
  with_teacher: bool,
  teacher_shardings: Any,
) -> tuple[Any, ...] | None:
  """What determines the jitted step, or None when `step_fn` is opaque.

  Only a `functools.partial` of a module-level function with hashable
  arguments has a key: a closure may capture anything.
  """
  if not isinstance(step_fn, functools.partial):
    return None
  fn = step_fn.func
  if "<locals>" in getattr(fn, "__qualname__", "<locals>"):
    return None
  key = (
    fn,
    # A module setting the model reads when the step is traced.
    transformer.CAUSAL_BLOCK,
    step_fn.args,
    tuple(sorted(step_fn.keywords.items())),
    layout.mesh,
    layout.rules,
    _tree_key(layout.state),
    with_teacher,
    _tree_key(teacher_shardings),
  )
  try:
    hash(key)
  except TypeError:
    return None
  return key


def _jit(
  step_fn: Callable[..., Any],
  layout: Layout,
  with_teacher: bool,
  teacher_shardings: Any,
) -> Any:
  def traced(state: TrainState, *args: Any):
    with shd.use_rules(layout.mesh, layout.rules):
      return step_fn(state, *args)

  in_shardings = (layout.state, layout.data)
  if with_teacher:
    in_shardings = (layout.state, teacher_shardings, layout.data)
  return jax.jit(
    traced,
    in_shardings=in_shardings,
    out_shardings=(layout.state, layout.replicated),
    donate_argnums=0,
  )


def teacher_terms(
  model: nnx.Module,
  teacher: ModelState,
  tokens_BxL: jax.Array,
  kind: losses.Divergence,
  temperature: float = 1.0,
  beta: float = 0.5,
  with_entropy: bool = False,
) -> dict[str, jax.Array]:
  """The student `model`'s per-token terms against a frozen teacher on
  `tokens_BxL`, each [B, L]: "logp", "divergence"
  (`losses.token_divergence`; the teacher gets no gradient), "agreement"
  (top-1) and, `with_entropy`, "entropy". With the student's
  `config.logits_chunk` > 0 both vocabulary projections run in chunks of
  positions (`losses.chunked_distill_terms`), so neither model's logits
  are held whole. `DistillError` unless the two vocabularies agree."""
  t_model = teacher.merge()
  if t_model.config.vocab_size != model.config.vocab_size:
    raise DistillError(
      f"student vocabulary {model.config.vocab_size} != teacher vocabulary "
      f"{t_model.config.vocab_size}: distillation needs one tokenizer"
    )
  chunk = model.config.logits_chunk
  if 0 < chunk < tokens_BxL.shape[1]:
    t_hidden_BxLxD = jax.lax.stop_gradient(t_model.hidden(tokens_BxL))
    return losses.chunked_distill_terms(
      model.final_norm(model.hidden(tokens_BxL)),
      t_model.final_norm(t_hidden_BxLxD),
      tokens_BxL,
      model.vocab_projection(),
      t_model.vocab_projection(),
      chunk,
      kind,
      temperature,
      beta,
      with_entropy,
    )
  logits_BxLxV = model(tokens_BxL)
  t_logits_BxLxV = jax.lax.stop_gradient(t_model(tokens_BxL))
  terms = {
    "divergence": losses.token_divergence(
      logits_BxLxV, t_logits_BxLxV, kind, temperature, beta
    ),
    "agreement": losses.top1_agreement(logits_BxLxV, t_logits_BxLxV),
  }
  if with_entropy:
    terms["logp"], terms["entropy"] = losses.token_logp_and_entropy(
      logits_BxLxV, tokens_BxL
    )
  else:
    terms["logp"] = losses.token_logp(logits_BxLxV, tokens_BxL)
  return terms


# ---------------------------------------------------------------------------
# RL: the clipped policy-gradient step.


@flax.struct.dataclass
class PolicyInputs:
  """What an RL update needs, all row-aligned ([B, ...] leaves).

  Per-turn advantages become per-token ones with
  `types.turns_to_tokens(adv_BxT, batch.turn_id_BxL)`. `ref_logp_BxL` is
  None when the KL term is off; `old_logp_BxL` defaults to the batch's
  behaviour log-probs (set it to recomputed ones from `compute_logp` to
  correct for sampler/trainer numerics).
  """

  batch: TrajectoryBatch
  adv_BxL: jax.Array
  ref_logp_BxL: jax.Array | None = None
  old_logp_BxL: jax.Array | None = None


def policy_loss_fn(
  model: nnx.Module,
  inputs: PolicyInputs,
  config: losses.PolicyLossConfig,
  teacher: ModelState | None = None,
  temperature: float = 1.0,
) -> tuple[jax.Array, Metrics]:
  """Forward pass + `losses.policy_loss` on one (micro)batch.

  The policy's log-probs and entropy are those of logits / `temperature`
  (the rollouts' sampling temperature). With a `teacher`, it runs too (no
  gradient) and its per-token divergence from the policy on the sampled
  sequences enters the loss at `config.teacher_coef` (on-policy
  distillation); `teacher_top1_agreement` is logged. The teacher path
  samples at temperature 1 only (`DistillError` otherwise).
  """
  batch = inputs.batch
  div_BxL = agree_BxL = None
  # The model's `logits_chunk` bounds the logits memory on both paths.
  if teacher is None:
    logp_BxL, entropy_BxL = model.token_logp(
      batch.tokens_BxL, with_entropy=True, temperature=temperature
    )
  elif temperature != 1.0:
    raise DistillError(
      f"on-policy distillation samples at temperature 1, not {temperature}"
    )
  else:
    terms = teacher_terms(
      model,
      teacher,
      batch.tokens_BxL,
      config.teacher_divergence,
      config.teacher_temperature,
      config.teacher_beta,
      with_entropy=True,
    )
    logp_BxL, entropy_BxL = terms["logp"], terms["entropy"]
    div_BxL, agree_BxL = terms["divergence"], terms["agreement"]
  old_BxL = (
    batch.behaviour_logp_BxL
    if inputs.old_logp_BxL is None
    else inputs.old_logp_BxL
  )
  loss, metrics = losses.policy_loss(
    logp_BxL,
    old_BxL,
    inputs.adv_BxL,
    batch.loss_mask_BxL,
    config,
    ref_logp_BxL=inputs.ref_logp_BxL,
    entropy_BxL=entropy_BxL,
    teacher_div_BxL=div_BxL,
    turn_id_BxL=batch.turn_id_BxL,
  )
  if agree_BxL is not None:
    metrics["teacher_top1_agreement"] = losses.masked_mean(
      agree_BxL, batch.loss_mask_BxL
    )
  metrics[LOSS_WEIGHT] = agg_weight(batch.loss_mask_BxL, config.agg)
  return loss, metrics


def train_step(
  state: TrainState,
  batch: TrajectoryBatch,
  adv_BxL: jax.Array,
  ref_logp_BxL: jax.Array | None,
  config: StepConfig,
  old_logp_BxL: jax.Array | None = None,
  teacher: ModelState | None = None,
) -> tuple[TrainState, Metrics]:
  """One RL update on a minibatch (pure; jit it with `make_train_step`)."""
  inputs = PolicyInputs(batch, adv_BxL, ref_logp_BxL, old_logp_BxL)
  loss_fn = functools.partial(
    policy_loss_fn,
    config=config.loss,
    teacher=teacher,
    temperature=config.sampling_temperature,
  )
  return update_step(state, inputs, loss_fn, config)


def make_train_step(
  config: StepConfig,
  layout: Layout,
  teacher: ModelState | None = None,
  teacher_shardings: Any = None,
) -> Callable[[TrainState, PolicyInputs], tuple[TrainState, Metrics]]:
  """The jitted RL step: `(state, PolicyInputs) -> (state, metrics)`.

  With `teacher` (frozen, on its own `teacher_shardings`; see `jit_step`),
  the loss has the teacher term of `losses.PolicyLossConfig`.
  """
  if config.loss.teacher_coef > 0 and teacher is None:
    raise DistillError("loss.teacher_coef > 0 needs a teacher")

  return jit_step(
    functools.partial(_rl_step, config=config),
    layout,
    teacher,
    teacher_shardings,
  )


def _rl_step(
  state: TrainState, *args: Any, config: StepConfig
) -> tuple[TrainState, Metrics]:
  """`train_step` on `([teacher,] PolicyInputs)`, as `jit_step` calls it."""
  *frozen, inputs = args
  return train_step(
    state,
    inputs.batch,
    inputs.adv_BxL,
    inputs.ref_logp_BxL,
    config,
    inputs.old_logp_BxL,
    teacher=frozen[0] if frozen else None,
  )


# ---------------------------------------------------------------------------
# Log-prob recomputation (reference / behaviour policy).


@functools.partial(jax.jit, static_argnames=("num_chunks", "temperature"))
def compute_logp(
  model_state: ModelState,
  tokens_BxL: jax.Array,
  num_chunks: int = 1,
  temperature: float = 1.0,
) -> jax.Array:
  """Token log-probs under `model_state` (of logits / `temperature`),
  aligned as `losses.token_logp`.

  `num_chunks` > 1 runs the rows in sequential chunks to bound the [B, L, V]
  logits memory. Shardings follow the (committed) inputs.
  """
  b = tokens_BxL.shape[0]
  if b % num_chunks:
    raise BatchShapeError(f"{b} rows not divisible into {num_chunks} chunks")

  def one(tokens_CxL: jax.Array) -> jax.Array:
    return model_state.merge().token_logp(tokens_CxL, temperature=temperature)[
      0
    ]

  if num_chunks == 1:
    return one(tokens_BxL)
  chunks = tokens_BxL.reshape(num_chunks, b // num_chunks, -1)
  return jax.lax.map(one, chunks).reshape(b, -1)


# ---------------------------------------------------------------------------
# Host loop: epochs x minibatches, with the one-behind finiteness guard.


@jax.jit
def _take_rows(inputs: Any, rows_N: jax.Array) -> Any:
  return jax.tree.map(lambda x: jnp.take(x, rows_N, axis=0), inputs)


def select_rows(inputs: Any, rows_N: np.ndarray, layout: Layout) -> Any:
  """Gathers rows on device (async) and lays them out for the step."""
  picked = _take_rows(inputs, jnp.asarray(rows_N, jnp.int32))
  return jax.device_put(picked, layout.data)


def minibatch_order(
  num_rows: int, minibatch_size: int, num_epochs: int, seed: int
) -> Iterator[np.ndarray]:
  """Row indices of each minibatch: a fresh permutation per epoch.

  Deterministic in `seed` (host numpy), so a resumed run replays the order.
  Trailing rows that do not fill a minibatch are dropped for that epoch.
  """
  if minibatch_size < 1 or minibatch_size > num_rows:
    raise BatchShapeError(
      f"minibatch_size {minibatch_size} must be in [1, {num_rows}]"
    )
  rng = np.random.default_rng(seed)
  for _ in range(num_epochs):
    perm = rng.permutation(num_rows)
    for i in range(num_rows // minibatch_size):
      yield perm[i * minibatch_size : (i + 1) * minibatch_size]


def epochs_for_steps(steps: int, num_rows: int, minibatch_size: int) -> int:
  """Epochs over `num_rows` rows that yield at least `steps` minibatches.

  An epoch yields `num_rows // minibatch_size` full minibatches (the rest
  of the rows wait for the next epoch's permutation), so the count is
  ceil(steps / that), not ceil(steps * minibatch_size / num_rows), which
  falls short whenever the size does not divide the rows.
  """
  per_epoch = num_rows // minibatch_size
  if per_epoch < 1:
    raise BatchShapeError(
      f"minibatch_size {minibatch_size} exceeds the {num_rows} rows"
    )
  return -(-steps // per_epoch)


def _fetch_checked(metrics: Metrics) -> dict[str, float]:
  host = {k: float(v) for k, v in shd.to_host(metrics).items()}
  if not host.get("finite", 1.0) or not np.isfinite(host["loss"]):
    raise NonFiniteLossError(int(host["step"]), host)
  return host


def run_steps(
  step_fn: Callable[[TrainState, Any], tuple[TrainState, Metrics]],
  state: TrainState,
  inputs_iter: Iterable[Any],
  on_metrics: Callable[[dict[str, float]], None] | None = None,
) -> tuple[TrainState, list[dict[str, float]]]:
  """Calls `step_fn` on each input; returns the state and host metrics.

  Step N's metrics are fetched only after step N+1 is dispatched, so the
  device never waits on the host. A non-finite loss raises
  `NonFiniteLossError` naming its step, with the newest state attached
  (at most one further update was dispatched after the bad one).
  """
  history: list[dict[str, float]] = []
  pending: Metrics | None = None

  def drain(metrics: Metrics) -> None:
    try:
      history.append(_fetch_checked(metrics))
    except NonFiniteLossError as e:
      e.state = state
      raise
    if on_metrics is not None:
      on_metrics(history[-1])

  for inputs in inputs_iter:
    state, metrics = step_fn(state, inputs)
    if pending is not None:
      drain(pending)
    pending = metrics
  if pending is not None:
    drain(pending)
  return state, history


def run_epochs(
  step_fn: Callable[[TrainState, Any], tuple[TrainState, Metrics]],
  state: TrainState,
  inputs: Any,
  layout: Layout,
  *,
  minibatch_size: int,
  num_epochs: int = 1,
  seed: int = 0,
  on_metrics: Callable[[dict[str, float]], None] | None = None,
) -> tuple[TrainState, list[dict[str, float]]]:
  """Several epochs of shuffled minibatch updates over one rollout batch."""
  order = minibatch_order(_rows(inputs), minibatch_size, num_epochs, seed)
  minibatches = (select_rows(inputs, rows, layout) for rows in order)
  return run_steps(step_fn, state, minibatches, on_metrics)
