"""Model configuration and named presets for the decoder family.

`ModelConfig` is a frozen (hashable) dataclass so it can sit in a module as
static metadata and be closed over by jitted functions. Dtypes are stored as
strings ("float32", "bfloat16") so a config round-trips through
ml_collections and JSON; `compute_dtype` / `weight_dtype` give the jnp types.

Presets: "tiny" (about 1M parameters, for CPU research and tests), "nano"
(a quarter of tiny, a student to distill into), "qwen3-bench" (the sampler
benchmark's shape) and the real shapes of Qwen2.5-0.5B, Qwen3-0.6B and
Llama-3.2-1B, meant for abstract instantiation (`nnx.eval_shape`) and
sharding plans, or for loading real weights.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
# What the training forward keeps for the backward pass (`remat`).
REMAT = ("none", "full", "dots")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """Llama-3 style frequency-dependent RoPE scaling ("rope_type": "llama3").

  Wavelengths longer than `original_max_len / low_freq_factor` are divided
  by `factor`, shorter than `original_max_len / high_freq_factor` are kept,
  and the band in between is interpolated smoothly.
  """

  factor: float
  low_freq_factor: float
  high_freq_factor: float
  original_max_len: int


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Shape and numerics of a Llama / Qwen2 / Qwen3 style decoder."""

  vocab_size: int
  d_model: int
  n_layers: int
  n_heads: int
  n_kv_heads: int
  head_dim: int
  mlp_dim: int
  rope_theta: float = 10_000.0
  norm_eps: float = 1e-6
  qk_norm: bool = False  # Qwen3: RMSNorm over head_dim on q and k
  attn_bias: bool = False  # Qwen2: biases on q, k and v projections
  tie_embeddings: bool = True
  dtype: str = "float32"  # compute (activations, KV cache)
  param_dtype: str = "float32"  # stored weights
  max_len: int = 2048  # longest sequence the model is meant for
  rope_scaling: RopeScaling | None = None
  # Rematerialisation of the teacher-forced forward (training), one of
  # REMAT: "none" keeps every block's activations for the backward pass;
  # "full" keeps only each block's input and recomputes the rest; "dots"
  # keeps the weight matmuls' outputs and recomputes norms, rotary,
  # softmax and activations. Not part of the parameter tree, and the
  # sampler's cached path ignores it (`transformer.scan_blocks`).
  remat: str = "none"
  # Positions per chunk of the vocabulary projection in the training
  # losses (`Transformer.token_logp`, `train.step.teacher_terms`;
  # `losses.map_position_chunks`): the [B, L, V] logits are never held
  # whole, only [B, logits_chunk, V] at a time, forward and backward.
  # 0: all positions at once.
  logits_chunk: int = 0

  def __post_init__(self):
    for name in (
      "vocab_size",
      "d_model",
      "n_layers",
      "n_heads",
      "n_kv_heads",
      "head_dim",
      "mlp_dim",
      "max_len",
    ):
      value = getattr(self, name)
      if not isinstance(value, int) or value <= 0:
        raise ValueError(f"ModelConfig.{name} must be a positive int: {value}")
    if self.n_heads % self.n_kv_heads:
      raise ValueError(
        f"ModelConfig.n_heads ({self.n_heads}) must be a multiple of "
        f"n_kv_heads ({self.n_kv_heads})"
      )
    if self.head_dim % 2:
      raise ValueError(
        f"ModelConfig.head_dim must be even for rotary embeddings: "
        f"{self.head_dim}"
      )
    if self.remat not in REMAT:
      raise ValueError(
        f"ModelConfig.remat must be one of {REMAT}: {self.remat!r}"
      )
    if not isinstance(self.logits_chunk, int) or self.logits_chunk < 0:
      raise ValueError(
        "ModelConfig.logits_chunk must be an int >= 0 (0: no chunks): "
        f"{self.logits_chunk!r}"
      )
    for name in ("dtype", "param_dtype"):
      if getattr(self, name) not in _DTYPES:
        raise ValueError(
          f"ModelConfig.{name} must be one of {sorted(_DTYPES)}: "
          f"{getattr(self, name)!r}"
        )

  @property
  def compute_dtype(self) -> jnp.dtype:
    return jnp.dtype(_DTYPES[self.dtype])

  @property
  def weight_dtype(self) -> jnp.dtype:
    return jnp.dtype(_DTYPES[self.param_dtype])

  @property
  def group_size(self) -> int:
    """Query heads per key/value head (grouped-query attention)."""
    return self.n_heads // self.n_kv_heads

  def replace(self, **changes) -> ModelConfig:
    return dataclasses.replace(self, **changes)

  def num_params(self) -> int:
    """Analytic parameter count (matches the module's parameter tree)."""
    d, hd = self.d_model, self.head_dim
    blocks, unembed = self.matmul_weights()
    per_layer = 2 * d  # the two norms
    if self.attn_bias:
      per_layer += hd * (self.n_heads + 2 * self.n_kv_heads)
    if self.qk_norm:
      per_layer += 2 * hd
    head = 0 if self.tie_embeddings else unembed
    return self.vocab_size * d + blocks + self.n_layers * per_layer + d + head

  def matmul_weights(self) -> tuple[int, int]:
    """(block weights a token multiplies by, unembedding weights): the
    products' weights, for FLOP counts (2 FLOPs a weight a token forward);
    norms, biases and the embedding lookup are no products."""
    d, hd = self.d_model, self.head_dim
    attn = d * hd * (2 * self.n_heads + 2 * self.n_kv_heads)
    return self.n_layers * (attn + 3 * d * self.mlp_dim), d * self.vocab_size

  def kv_cache_bytes_per_slot(self, max_len: int) -> int:
    """2 (k and v) * layers * length * kv heads * head_dim * bytes."""
    return (
      2
      * self.n_layers
      * max_len
      * self.n_kv_heads
      * self.head_dim
      * self.compute_dtype.itemsize
    )


PRESETS: dict[str, ModelConfig] = {
  "tiny": ModelConfig(
    vocab_size=512,
    d_model=128,
    n_layers=4,
    n_heads=4,
    n_kv_heads=2,
    head_dim=32,
    mlp_dim=384,
    rope_theta=10_000.0,
    norm_eps=1e-6,
    qk_norm=True,
    tie_embeddings=True,
    max_len=1024,
  ),
  # A student for distillation tests and studies: a quarter of tiny's
  # parameters (half the width; same depth, heads and vocabulary).
  "nano": ModelConfig(
    vocab_size=512,
    d_model=64,
    n_layers=4,
    n_heads=4,
    n_kv_heads=2,
    head_dim=16,
    mlp_dim=192,
    rope_theta=10_000.0,
    norm_eps=1e-6,
    qk_norm=True,
    tie_embeddings=True,
    max_len=1024,
  ),
  "qwen3-bench": ModelConfig(
    vocab_size=1024,
    d_model=256,
    n_layers=4,
    n_heads=4,
    n_kv_heads=2,
    head_dim=64,
    mlp_dim=1024,
    rope_theta=1_000_000.0,
    norm_eps=1e-6,
    qk_norm=True,
    tie_embeddings=True,
    max_len=2048,
  ),
  "qwen2.5-0.5b": ModelConfig(
    vocab_size=151_936,
    d_model=896,
    n_layers=24,
    n_heads=14,
    n_kv_heads=2,
    head_dim=64,
    mlp_dim=4864,
    rope_theta=1_000_000.0,
    norm_eps=1e-6,
    attn_bias=True,
    tie_embeddings=True,
    max_len=32_768,
  ),
  "qwen3-0.6b": ModelConfig(
    vocab_size=151_936,
    d_model=1024,
    n_layers=28,
    n_heads=16,
    n_kv_heads=8,
    head_dim=128,
    mlp_dim=3072,
    rope_theta=1_000_000.0,
    norm_eps=1e-6,
    qk_norm=True,
    tie_embeddings=True,
    max_len=40_960,
  ),
  "llama-3.2-1b": ModelConfig(
    vocab_size=128_256,
    d_model=2048,
    n_layers=16,
    n_heads=32,
    n_kv_heads=8,
    head_dim=64,
    mlp_dim=8192,
    rope_theta=500_000.0,
    norm_eps=1e-5,
    tie_embeddings=True,
    max_len=131_072,
    rope_scaling=RopeScaling(
      factor=32.0,
      low_freq_factor=1.0,
      high_freq_factor=4.0,
      original_max_len=8192,
    ),
  ),
}


# The fields that size a preset, which a run config's `model` section may
# set over the preset's (`train.loop`; 0 there: the preset's value).
SHAPE_FIELDS = (
  "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "mlp_dim",
)  # fmt: skip


def get_preset(name: str, **overrides) -> ModelConfig:
  """Returns the named preset, with optional field overrides."""
  if name not in PRESETS:
    raise KeyError(
      f"unknown model preset {name!r}; available: {sorted(PRESETS)}"
    )
  config = PRESETS[name]
  return config.replace(**overrides) if overrides else config
