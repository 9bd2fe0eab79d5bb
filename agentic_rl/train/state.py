"""Train state, optimizer and their sharded creation.

Flax NNX idiom (used by every jitted function in `agentic_rl.train`): the
model lives *outside* jit as a `ModelState` = static `nnx.GraphDef` plus two
`nnx.State` pytrees (`params`: the `nnx.Param`s we train; `rest`: any other
variables). Jitted functions are plain `jax.jit` over these pytrees with
explicit in/out shardings and donated state; inside, `nnx.merge` rebuilds the
module to call it. Nothing mutates a module across a jit boundary, so the
step is a pure function of arrays.

Creation is abstract first: `jax.eval_shape` gives the shapes of params and
optimizer state without allocating; their logical axis names (the params'
`out_sharding` metadata, which optax's moment trees inherit) are mapped onto
the mesh by `agentic_rl.sharding`; then one jitted init materializes every
array directly in its sharded layout.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Collection
from typing import Any, Literal

import flax.struct
import jax
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from agentic_rl import sharding as shd
from agentic_rl.models.config import ModelConfig
from agentic_rl.models.transformer import Transformer


class StateConfigError(ValueError):
  """An optimizer or state setting is out of range."""


# ---------------------------------------------------------------------------
# Optimizer.


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
  """AdamW with global-norm clipping and a warmup + constant/cosine schedule.

  The learning rate rises linearly from 0 over `warmup_steps`, then stays
  constant or follows a cosine to `end_lr_ratio * learning_rate` at
  `total_steps` (counted from step 0, warmup included). Weight decay skips
  vectors (norm scales, biases). Frozen so it can be a static jit argument.
  """

  learning_rate: float = 1e-6
  schedule: Literal["constant", "cosine"] = "constant"
  warmup_steps: int = 0
  total_steps: int = 0  # cosine only
  end_lr_ratio: float = 0.0
  weight_decay: float = 0.0
  b1: float = 0.9
  b2: float = 0.999
  eps: float = 1e-8
  max_grad_norm: float | None = 1.0

  def __post_init__(self):
    # `not x >= 0` rather than `x < 0`: NaN fails every comparison.
    if not self.learning_rate >= 0 or math.isinf(self.learning_rate):
      raise StateConfigError(
        f"learning_rate must be finite and >= 0: {self.learning_rate}"
      )
    if not self.weight_decay >= 0 or math.isinf(self.weight_decay):
      raise StateConfigError(
        f"weight_decay must be finite and >= 0: {self.weight_decay}"
      )
    if not (0 <= self.b1 < 1 and 0 <= self.b2 < 1):
      raise StateConfigError(
        f"b1 and b2 must be in [0, 1): {self.b1}, {self.b2}"
      )
    if not self.eps > 0 or math.isinf(self.eps):
      raise StateConfigError(f"eps must be finite and > 0: {self.eps}")
    if self.schedule not in ("constant", "cosine"):
      raise StateConfigError(
        f"schedule must be 'constant' or 'cosine': {self.schedule!r}"
      )
    if self.warmup_steps < 0:
      raise StateConfigError(f"warmup_steps must be >= 0: {self.warmup_steps}")
    if self.schedule == "cosine" and self.total_steps <= self.warmup_steps:
      raise StateConfigError(
        f"cosine needs total_steps ({self.total_steps}) > warmup_steps "
        f"({self.warmup_steps})"
      )
    if self.max_grad_norm is not None and not self.max_grad_norm > 0:
      raise StateConfigError(
        f"max_grad_norm must be > 0 or None: {self.max_grad_norm}"
      )

  @classmethod
  def from_dict(cls, d: Any) -> OptimizerConfig:
    """From a mapping (e.g. `ConfigDict.to_dict()`); unknown keys raise."""
    d = dict(d)
    check_known_keys(cls, d, "optimizer", StateConfigError)
    return cls(**d)


def check_known_keys(
  known: type | Collection[str],
  d: Any,
  what: str,
  error: type[Exception],
  others: Collection[str] = (),
) -> None:
  """Raises `error` naming the keys of `d` that are neither fields of
  `known` (a dataclass, or the names themselves) nor in `others` (keys the
  caller reads itself): a config section with a typo fails loudly."""
  names = (
    {f.name for f in dataclasses.fields(known)}
    if dataclasses.is_dataclass(known)
    else set(known)
  ) | set(others)
  unknown = set(d) - names
  if unknown:
    raise error(
      f"unknown {what} keys: {sorted(unknown)} (known: {sorted(names)})"
    )


def make_schedule(config: OptimizerConfig) -> optax.Schedule:
  lr = config.learning_rate
  if config.schedule == "cosine":
    return optax.warmup_cosine_decay_schedule(
      init_value=0.0,
      peak_value=lr,
      warmup_steps=config.warmup_steps,
      decay_steps=config.total_steps,
      end_value=lr * config.end_lr_ratio,
    )
  if config.warmup_steps == 0:
    return optax.constant_schedule(lr)
  return optax.join_schedules(
    [
      optax.linear_schedule(0.0, lr, config.warmup_steps),
      optax.constant_schedule(lr),
    ],
    [config.warmup_steps],
  )


def _decay_mask(params: Any) -> Any:
  # Decaying norm scales and biases hurts; only matrices are regularized.
  return jax.tree.map(lambda p: p.ndim >= 2, params)


def make_optimizer(config: OptimizerConfig) -> optax.GradientTransformation:
  """Clip by global norm, then AdamW on the schedule.

  Pure function of the (hashable) config, so the jitted step rebuilds it at
  trace time instead of carrying function objects in the state.
  """
  adamw = optax.adamw(
    make_schedule(config),
    b1=config.b1,
    b2=config.b2,
    eps=config.eps,
    weight_decay=config.weight_decay,
    mask=_decay_mask,
  )
  if config.max_grad_norm is None:
    return adamw
  return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), adamw)


# ---------------------------------------------------------------------------
# State pytrees.


@flax.struct.dataclass
class ModelState:
  """A model as pytrees: static graph, trained params, other variables."""

  graphdef: nnx.GraphDef = flax.struct.field(pytree_node=False)
  params: nnx.State
  rest: nnx.State

  def merge(self) -> nnx.Module:
    """The module; call inside jit (it shares these arrays, no copy)."""
    return nnx.merge(self.graphdef, self.params, self.rest)

  @classmethod
  def from_module(cls, module: nnx.Module) -> ModelState:
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)
    return cls(graphdef=graphdef, params=params, rest=rest)


@flax.struct.dataclass
class TrainState:
  """Everything an update changes, plus the run's PRNG key.

  `step` counts applied optimizer updates (int32 scalar). `rng` is a typed
  key the training loop threads through sampling; it is checkpointed with
  the rest so a resumed run draws the same numbers.
  """

  model: ModelState
  opt_state: optax.OptState
  step: jax.Array
  rng: jax.Array


@dataclasses.dataclass(frozen=True)
class Layout:
  """Where things live: the mesh, the rules, and the state's shardings."""

  mesh: Mesh
  rules: shd.Rules
  state: Any  # a TrainState-shaped pytree of NamedSharding

  @property
  def data(self) -> NamedSharding:
    """Batch rows over the data-parallel axes, every other dim whole."""
    return shd.logical_sharding((shd.BATCH,), self.rules, self.mesh)

  @property
  def replicated(self) -> NamedSharding:
    return NamedSharding(self.mesh, PartitionSpec())

  @property
  def data_parallel_size(self) -> int:
    spec = self.data.spec[0] if self.data.spec else None
    if spec is None:
      return 1
    axes = (spec,) if isinstance(spec, str) else spec
    size = 1
    for a in axes:
      size *= self.mesh.shape[a]
    return size


def _init_state(
  model_config: ModelConfig, opt_config: OptimizerConfig, seed: int | jax.Array
) -> TrainState:
  params_key, rng = jax.random.split(jax.random.key(seed))
  model = Transformer(model_config, rngs=nnx.Rngs(params=params_key))
  model_state = ModelState.from_module(model)
  opt_state = make_optimizer(opt_config).init(model_state.params)
  return TrainState(
    model=model_state,
    opt_state=opt_state,
    step=jnp.zeros((), jnp.int32),
    rng=rng,
  )


def abstract_train_state(
  model_config: ModelConfig, opt_config: OptimizerConfig, seed: int = 0
) -> TrainState:
  """Shapes and dtypes only (ShapeDtypeStruct leaves); allocates nothing."""
  return jax.eval_shape(lambda: _init_state(model_config, opt_config, seed))


def make_layout(
  abstract_state: TrainState,
  mesh: Mesh | None = None,
  rules: shd.Rules = shd.DEFAULT_TRAIN_RULES,
) -> Layout:
  """Shardings for every leaf of the state (1x1x1 mesh by default)."""
  mesh = shd.make_mesh((1, 1, 1)) if mesh is None else mesh
  return Layout(
    mesh=mesh,
    rules=tuple(rules),
    state=shd.state_shardings(abstract_state, mesh, rules),
  )


def with_shardings(abstract: Any, shardings: Any) -> Any:
  """ShapeDtypeStructs carrying their target shardings (for restore)."""
  return jax.tree.map(
    lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
    abstract,
    shardings,
  )


@functools.lru_cache(maxsize=16)
def _jitted_init(
  model_config: ModelConfig,
  opt_config: OptimizerConfig,
  mesh: Mesh,
  rules: shd.Rules,
) -> tuple[Callable[[jax.Array], TrainState], Layout]:
  # Cached so a second state for the same model and mesh (tests, reference
  # copies) reuses the compiled initializer.
  abstract = abstract_train_state(model_config, opt_config)
  layout = make_layout(abstract, mesh, rules)
  init = jax.jit(
    lambda seed: _init_state(model_config, opt_config, seed),
    out_shardings=layout.state,
  )
  return init, layout


def create_train_state(
  model_config: ModelConfig,
  opt_config: OptimizerConfig,
  *,
  seed: int = 0,
  mesh: Mesh | None = None,
  rules: shd.Rules = shd.DEFAULT_TRAIN_RULES,
) -> tuple[TrainState, Layout]:
  """A freshly initialized state, born sharded; and its layout.

  The same seed gives the same parameters on every mesh shape.
  """
  mesh = shd.make_mesh((1, 1, 1)) if mesh is None else mesh
  init, layout = _jitted_init(model_config, opt_config, mesh, tuple(rules))
  return init(jnp.asarray(seed, jnp.int32)), layout


def copy_model(model_state: ModelState) -> ModelState:
  """A copy with its own buffers, e.g. a frozen reference policy.

  Needed because the train step donates the state: a reference that merely
  aliased `state.model` would be invalidated by the first update.
  """
  return jax.tree.map(jnp.copy, model_state)


def count_params(model_state: ModelState) -> int:
  return sum(x.size for x in jax.tree.leaves(model_state.params))
