"""Decoder-only transformer of the Llama / Qwen2 / Qwen3 family in Flax NNX.

Dimension letters (see `agentic_rl.types`): B batch, L tokens, D d_model,
H query heads, K kv heads, V vocab, F mlp width, S sampler slots; plus
`Dh` for the per-head width (head_dim) and `C` for a chunk of new tokens
appended to a KV cache.

Parameter tree (path, shape, logical axes). Names follow Hugging Face's
Llama/Qwen modules so a weight converter is a table of transposes:

  embed.embedding                  VxD     (vocab, embed)
  layers[i].attn_norm.scale        D       (embed,)
  layers[i].attn.q_proj.kernel     DxHxDh  (embed, heads, head_dim)
  layers[i].attn.q_proj.bias       HxDh    (heads, head_dim)   if attn_bias
  layers[i].attn.k_proj.kernel     DxKxDh  (embed, kv_heads, head_dim)
  layers[i].attn.k_proj.bias       KxDh                        if attn_bias
  layers[i].attn.v_proj.kernel     DxKxDh  (embed, kv_heads, head_dim)
  layers[i].attn.v_proj.bias       KxDh                        if attn_bias
  layers[i].attn.o_proj.kernel     HxDhxD  (heads, head_dim, embed)
  layers[i].attn.q_norm.scale      Dh      (head_dim,)         if qk_norm
  layers[i].attn.k_norm.scale      Dh      (head_dim,)         if qk_norm
  layers[i].mlp_norm.scale         D       (embed,)
  layers[i].mlp.gate_proj.kernel   DxF     (embed, mlp)
  layers[i].mlp.up_proj.kernel     DxF     (embed, mlp)
  layers[i].mlp.down_proj.kernel   FxD     (mlp, embed)
  final_norm.scale                 D       (embed,)
  lm_head.kernel                   DxV     (embed, vocab)      if not tied

From a Hugging Face state dict (torch `Linear.weight` is out x in):
`q_proj.kernel = W.T.reshape(D, H, Dh)`, `k_proj`/`v_proj` likewise with K,
`q_proj.bias = b.reshape(H, Dh)`, `o_proj.kernel = W.T.reshape(H, Dh, D)`,
MLP kernels `W.T`, `lm_head.kernel = W.T`, embeddings and norm weights as
they are (HF's Llama/Qwen RMSNorm multiplies by `weight`, not `1 + weight`).
Rotary embeddings use HF's "rotate half" layout, so no permutation of q/k
rows is needed.

Calls:
  * `model(tokens_BxL, positions_BxL=None) -> logits_BxLxV` (float32),
    causal over the sequence index; positions (default 0..L-1) only feed the
    rotary embedding.
  * `model.forward_cached(tokens_BxC, positions_BxC, write_BxC, cache)`
    `-> (hidden_BxCxD, cache)`: the sampler's path. Each new token's key and
    value are written into `cache` at its own position (only where
    `write_BxC`), and each query attends to every cache entry at a position
    <= its own. `model.unembed(hidden)` gives logits.

Parameters carry logical axis names as `out_sharding` metadata (with eager
sharding off); `agentic_rl.sharding` maps them onto a mesh.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import flax.struct
import jax
import jax.numpy as jnp
from flax import nnx

from agentic_rl import losses
from agentic_rl import sharding as shd
from agentic_rl.models.config import ModelConfig, RopeScaling

_F32 = jnp.float32


# Size of the first KV-cache blocks (`cache_block_lens`); block boundaries
# then fall on the sampler's default span buckets, 128 * 2**i.
CACHE_BLOCK = 128


@flax.struct.dataclass
class KVCache:
  """Per-layer key/value caches, each a tuple of blocks of positions.

  `v[i][j]` has shape SxKxBjxDh (slots, kv heads, the Bj positions of block
  j, head_dim) and `k[i][j]` the transposed SxKxDhxBj; block j holds
  positions sum(B_0..B_j-1) onward. With (slot, kv head) leading, both
  attention matmuls over a block are batched GEMMs that read it in place:
  scores contract Dh, the row dimension of a DhxB key block, and the
  weighted sum contracts B, the row dimension of a BxDh value block. (Keys
  stored BxDh made XLA:CPU transpose them at every decode step, which cost
  about as much as the model's weight matmuls.)

  Blocks let attention read a prefix of the cache (`span`) without copying
  it: slicing the first 128 positions out of one long array materialised
  the slice at every decode step, a third of the step at batch 8; a
  prefix of whole blocks is just the first few arrays. Block sizes double
  (`cache_block_lens`), so a long span still reads only a few blocks: each
  block adds a few small ops per layer and step. The cache holds no
  lengths: the caller tracks how many positions of each row are valid.
  """

  k: tuple[tuple[jax.Array, ...], ...]
  v: tuple[tuple[jax.Array, ...], ...]

  @property
  def num_slots(self) -> int:
    return self.v[0][0].shape[0]

  @property
  def block_lens(self) -> tuple[int, ...]:
    return tuple(block.shape[2] for block in self.v[0])

  @property
  def max_len(self) -> int:
    return sum(self.block_lens)

  @property
  def nbytes(self) -> int:
    return sum(x.nbytes for x in jax.tree.leaves((self.k, self.v)))


K_CACHE_AXES = (shd.BATCH, shd.KV_HEADS, shd.HEAD_DIM, shd.LENGTH)
V_CACHE_AXES = (shd.BATCH, shd.KV_HEADS, shd.LENGTH, shd.HEAD_DIM)


def map_cache(fn, cache: KVCache) -> KVCache:
  """`fn(array, logical_axes)` applied to every key and value block."""
  return KVCache(
    k=tuple(tuple(fn(x, K_CACHE_AXES) for x in layer) for layer in cache.k),
    v=tuple(tuple(fn(x, V_CACHE_AXES) for x in layer) for layer in cache.v),
  )


def cache_block_lens(max_len: int, block_len: int) -> tuple[int, ...]:
  """Block sizes covering `max_len`: block_len twice, then doubling.

  Block boundaries fall at block_len * 2**i (128, 256, 512, ... by
  default), the sampler's default span buckets, so a span reads whole
  blocks, and a span of n positions reads about log2(n / block_len) + 1 of
  them. The last block is cut at max_len.
  """
  if max_len <= 0 or block_len <= 0:
    raise ValueError(
      f"cache max_len ({max_len}) and block_len ({block_len}) must be positive"
    )
  lens, total = [], 0
  while total < max_len:
    size = min(max(block_len, total), max_len - total)
    lens.append(size)
    total += size
  return tuple(lens)


def init_cache(
  config: ModelConfig,
  num_slots: int,
  max_len: int,
  block_len: int = CACHE_BLOCK,
) -> KVCache:
  """Zero KV cache for `num_slots` rows of `max_len` positions."""
  lens = cache_block_lens(max_len, block_len)
  s, kv, dh = num_slots, config.n_kv_heads, config.head_dim
  zeros = lambda shape: jnp.zeros(shape, config.compute_dtype)
  return KVCache(
    k=tuple(
      tuple(zeros((s, kv, dh, b)) for b in lens) for _ in range(config.n_layers)
    ),
    v=tuple(
      tuple(zeros((s, kv, b, dh)) for b in lens) for _ in range(config.n_layers)
    ),
  )


def _param(
  rngs: nnx.Rngs,
  shape: tuple[int, ...],
  axes: tuple[str, ...],
  std: float,
  dtype: jnp.dtype,
) -> nnx.Param:
  value = std * jax.random.normal(rngs.params(), shape, _F32)
  return nnx.Param(value.astype(dtype), out_sharding=axes, eager_sharding=False)


class Dense(nnx.Module):
  """Contracts the trailing `len(in_shape)` input dims with the kernel.

  kernel: in_shape + out_shape; bias (optional): out_shape. The init is
  normal with std 1/sqrt(fan_in). `with_kernels_out_first` stores it as
  out_shape + in_shape instead (`out_first`), the layout of a torch
  `Linear.weight`; the result is the same.
  """

  def __init__(
    self,
    in_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    axes: tuple[str, ...],
    *,
    use_bias: bool,
    config: ModelConfig,
    rngs: nnx.Rngs,
  ):
    self.n_in = len(in_shape)
    self.out_first = False
    self.dtype = config.compute_dtype
    std = 1.0 / math.sqrt(math.prod(in_shape))
    self.kernel = _param(
      rngs, in_shape + out_shape, axes, std, config.weight_dtype
    )
    if use_bias:
      self.bias = nnx.Param(
        jnp.zeros(out_shape, config.weight_dtype),
        out_sharding=axes[self.n_in :],
        eager_sharding=False,
      )
    else:
      self.bias = None

  def __call__(self, x: jax.Array) -> jax.Array:
    kernel = self.kernel[...].astype(self.dtype)
    axes = self.n_in  # x's trailing dims with the kernel's leading ones
    if self.out_first:  # out_shape + in_shape: with the kernel's trailing
      axes = (
        tuple(range(x.ndim - self.n_in, x.ndim)),
        tuple(range(kernel.ndim - self.n_in, kernel.ndim)),
      )
    y = jnp.tensordot(x.astype(self.dtype), kernel, axes=axes)
    if self.bias is not None:
      y = y + self.bias[...].astype(self.dtype)
    return y


class RMSNorm(nnx.Module):
  """x / rms(x) * scale, normalised in float32 like HF's Llama/Qwen."""

  def __init__(self, dim: int, axis: str, config: ModelConfig):
    self.eps = config.norm_eps
    self.dtype = config.compute_dtype
    self.scale = nnx.Param(
      jnp.ones((dim,), config.weight_dtype),
      out_sharding=(axis,),
      eager_sharding=False,
    )

  def __call__(self, x: jax.Array) -> jax.Array:
    x32 = x.astype(_F32)
    var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    normed = (x32 * jax.lax.rsqrt(var + self.eps)).astype(self.dtype)
    return normed * self.scale[...].astype(self.dtype)


def rope_inv_freq(config: ModelConfig) -> jax.Array:
  """Inverse frequencies (Dh/2,), with Llama-3 scaling if configured."""
  exponents = jnp.arange(0, config.head_dim, 2, dtype=_F32) / config.head_dim
  inv_freq = 1.0 / (config.rope_theta**exponents)
  if config.rope_scaling is not None:
    inv_freq = _llama3_scale(inv_freq, config.rope_scaling)
  return inv_freq


def _llama3_scale(inv_freq: jax.Array, s: RopeScaling) -> jax.Array:
  wavelen = 2 * math.pi / inv_freq
  low_wavelen = s.original_max_len / s.low_freq_factor
  high_wavelen = s.original_max_len / s.high_freq_factor
  smooth = (s.original_max_len / wavelen - s.low_freq_factor) / (
    s.high_freq_factor - s.low_freq_factor
  )
  interpolated = (1 - smooth) * inv_freq / s.factor + smooth * inv_freq
  scaled = jnp.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)
  mid = (wavelen <= low_wavelen) & (wavelen >= high_wavelen)
  return jnp.where(mid, interpolated, scaled)


def apply_rope(
  x_BxLxNxDh: jax.Array, positions_BxL: jax.Array, inv_freq: jax.Array
) -> jax.Array:
  """Rotary embedding, "rotate half" layout (first half pairs with second)."""
  angles_BxLxR = positions_BxL[..., None].astype(_F32) * inv_freq
  cos_BxLx1xR = jnp.cos(angles_BxLxR)[:, :, None, :]
  sin_BxLx1xR = jnp.sin(angles_BxLxR)[:, :, None, :]
  x32 = x_BxLxNxDh.astype(_F32)
  x1, x2 = jnp.split(x32, 2, axis=-1)
  out = jnp.concatenate(
    [x1 * cos_BxLx1xR - x2 * sin_BxLx1xR, x2 * cos_BxLx1xR + x1 * sin_BxLx1xR],
    axis=-1,
  )
  return out.astype(x_BxLxNxDh.dtype)


def attend(
  q_BxCxHxDh: jax.Array,
  k_BxKxLxDh: jax.Array,
  v_BxKxLxDh: jax.Array,
  mask_BxCxL: jax.Array,
  *,
  keys_transposed: bool = False,
) -> jax.Array:
  """Grouped-query softmax attention; scores and softmax in float32.

  Keys and values are head-major (BxKxLxDh), so both matmuls batch over
  (B, K). With `keys_transposed` the keys come as BxKxDhxL, the KV cache's
  key layout, which the score matmul reads without a transpose.
  """
  b, c, h, dh = q_BxCxHxDh.shape
  k = k_BxKxLxDh.shape[1]
  q_BxKxCxGxDh = q_BxCxHxDh.reshape(b, c, k, h // k, dh).transpose(
    0, 2, 1, 3, 4
  )
  scores_BxKxCxGxL = jnp.einsum(
    "bkcgd,bkdl->bkcgl" if keys_transposed else "bkcgd,bkld->bkcgl",
    q_BxKxCxGxDh,
    k_BxKxLxDh.astype(q_BxCxHxDh.dtype),
    preferred_element_type=_F32,
  ) * (dh**-0.5)
  # A finite floor, not -inf: a fully masked row (padding) stays NaN-free.
  mask_Bx1xCx1xL = mask_BxCxL[:, None, :, None, :]
  scores_BxKxCxGxL = jnp.where(
    mask_Bx1xCx1xL, scores_BxKxCxGxL, jnp.finfo(_F32).min
  )
  probs = jax.nn.softmax(scores_BxKxCxGxL, axis=-1).astype(q_BxCxHxDh.dtype)
  out_BxKxCxGxDh = jnp.einsum(
    "bkcgl,bkld->bkcgd", probs, v_BxKxLxDh.astype(q_BxCxHxDh.dtype)
  )
  return out_BxKxCxGxDh.transpose(0, 2, 1, 3, 4).reshape(b, c, h, dh)


def attend_cache(
  q_BxCxHxDh: jax.Array,
  k_blocks: Sequence[jax.Array],
  v_blocks: Sequence[jax.Array],
  positions_BxC: jax.Array,
) -> jax.Array:
  """`attend` over a blocked KV cache: query at position p sees keys <= p.

  `k_blocks[j]` is BxKxDhxBj (keys transposed, as `KVCache` stores them)
  and `v_blocks[j]` BxKxBjxDh; block j holds the positions after blocks
  0..j-1. The softmax runs over all blocks at once without joining them:
  the scores' maximum over every block comes first, then each block's
  exp(score - max) weighs its values, and the sum is divided by the total
  weight. That is softmax attention over the concatenated cache up to float
  summation order, and reads each block in place.
  """
  if len(k_blocks) == 1:  # one block: plain softmax attention
    n = v_blocks[0].shape[2]
    mask_BxCxN = jnp.arange(n)[None, None, :] <= positions_BxC[..., None]
    return attend(
      q_BxCxHxDh, k_blocks[0], v_blocks[0], mask_BxCxN, keys_transposed=True
    )
  b, c, h, dh = q_BxCxHxDh.shape
  k = v_blocks[0].shape[1]
  q_BxKxCxGxDh = q_BxCxHxDh.reshape(b, c, k, h // k, dh).transpose(
    0, 2, 1, 3, 4
  )
  query_pos_Bx1xCx1x1 = positions_BxC[:, None, :, None, None]
  scores, start = [], 0
  for k_block in k_blocks:
    n = k_block.shape[-1]
    scores_BxKxCxGxN = jnp.einsum(
      "bkcgd,bkdn->bkcgn",
      q_BxKxCxGxDh,
      k_block.astype(q_BxCxHxDh.dtype),
      preferred_element_type=_F32,
    ) * (dh**-0.5)
    visible = jnp.arange(start, start + n) <= query_pos_Bx1xCx1x1
    # A finite floor, not -inf: a fully masked row (padding) stays NaN-free.
    scores.append(jnp.where(visible, scores_BxKxCxGxN, jnp.finfo(_F32).min))
    start += n
  max_BxKxCxGx1 = functools.reduce(
    jnp.maximum, [x.max(axis=-1, keepdims=True) for x in scores]
  )
  total_BxKxCxGx1 = 0.0
  out_BxKxCxGxDh = 0.0
  for scores_BxKxCxGxN, v_block in zip(scores, v_blocks, strict=True):
    weights = jnp.exp(scores_BxKxCxGxN - max_BxKxCxGx1)
    total_BxKxCxGx1 = total_BxKxCxGx1 + weights.sum(axis=-1, keepdims=True)
    out_BxKxCxGxDh = out_BxKxCxGxDh + jnp.einsum(
      "bkcgn,bknd->bkcgd",
      weights.astype(q_BxCxHxDh.dtype),
      v_block.astype(q_BxCxHxDh.dtype),
      preferred_element_type=_F32,
    )
  out_BxKxCxGxDh = (out_BxKxCxGxDh / total_BxKxCxGx1).astype(q_BxCxHxDh.dtype)
  return out_BxKxCxGxDh.transpose(0, 2, 1, 3, 4).reshape(b, c, h, dh)


# Query block of `causal_attend`: on a CPU, 64-row blocks ran the attention
# of a training step (B=32, L=512..1024, tiny preset) about 2x faster than
# the full LxL form, forward and backward (experiments/benchmarks).
CAUSAL_BLOCK = 64


def causal_attend(
  q_BxLxHxDh: jax.Array,
  k_BxKxLxDh: jax.Array,
  v_BxKxLxDh: jax.Array,
  block: int | None = None,
) -> jax.Array:
  """Causal `attend` over the sequence index, one query block at a time.

  Query rows [s, e) attend only to keys [0, e): the upper-triangle blocks
  that the causal mask would zero are never computed, which roughly halves
  the score and softmax work and keeps each block's scores small. The
  softmax of every row sees exactly the keys it would in the full form
  (masked keys contribute exp(floor - max) = 0 there), so the result equals
  `attend` with a lower-triangular mask up to float summation order.
  `block` defaults to the module's `CAUSAL_BLOCK`, read at trace time; a
  block of at least L is the full form.
  """
  l = q_BxLxHxDh.shape[1]
  block = CAUSAL_BLOCK if block is None else block
  if block < 1:
    raise ValueError(f"causal_attend block must be >= 1: {block}")
  outs = []
  for s in range(0, l, block):
    e = min(s + block, l)
    mask_1xCxE = (jnp.arange(e)[None, :] <= jnp.arange(s, e)[:, None])[None]
    outs.append(
      attend(
        q_BxLxHxDh[:, s:e],
        k_BxKxLxDh[:, :, :e],
        v_BxKxLxDh[:, :, :e],
        mask_1xCxE,
      )
    )
  return outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=1)


def head_major(x_BxLxKxDh: jax.Array) -> jax.Array:
  return x_BxLxKxDh.transpose(0, 2, 1, 3)


class Attention(nnx.Module):
  def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
    d, h, k, dh = (
      config.d_model,
      config.n_heads,
      config.n_kv_heads,
      config.head_dim,
    )
    bias = config.attn_bias
    self.q_proj = Dense(
      (d,), (h, dh), (shd.EMBED, shd.HEADS, shd.HEAD_DIM),
      use_bias=bias, config=config, rngs=rngs,
    )  # fmt: skip
    self.k_proj = Dense(
      (d,), (k, dh), (shd.EMBED, shd.KV_HEADS, shd.HEAD_DIM),
      use_bias=bias, config=config, rngs=rngs,
    )  # fmt: skip
    self.v_proj = Dense(
      (d,), (k, dh), (shd.EMBED, shd.KV_HEADS, shd.HEAD_DIM),
      use_bias=bias, config=config, rngs=rngs,
    )  # fmt: skip
    self.o_proj = Dense(
      (h, dh), (d,), (shd.HEADS, shd.HEAD_DIM, shd.EMBED),
      use_bias=False, config=config, rngs=rngs,
    )  # fmt: skip
    if config.qk_norm:
      self.q_norm = RMSNorm(dh, shd.HEAD_DIM, config)
      self.k_norm = RMSNorm(dh, shd.HEAD_DIM, config)
    else:
      self.q_norm = self.k_norm = None
    self.config = config

  def project(
    self, x_BxCxD: jax.Array, positions_BxC: jax.Array
  ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """q, k (normed if qk_norm, then rotated) and v for new tokens."""
    q = self.q_proj(x_BxCxD)
    k = self.k_proj(x_BxCxD)
    v = self.v_proj(x_BxCxD)
    if self.q_norm is not None:
      q, k = self.q_norm(q), self.k_norm(k)
    inv_freq = rope_inv_freq(self.config)  # a constant under jit
    q = apply_rope(q, positions_BxC, inv_freq)
    k = apply_rope(k, positions_BxC, inv_freq)
    q = shd.constrain(q, (shd.BATCH, shd.LENGTH, shd.HEADS, shd.HEAD_DIM))
    k = shd.constrain(k, (shd.BATCH, shd.LENGTH, shd.KV_HEADS, shd.HEAD_DIM))
    v = shd.constrain(v, (shd.BATCH, shd.LENGTH, shd.KV_HEADS, shd.HEAD_DIM))
    return q, k, v

  def __call__(self, x_BxLxD: jax.Array, positions_BxL: jax.Array) -> jax.Array:
    """Causal self-attention over the sequence index."""
    q, k, v = self.project(x_BxLxD, positions_BxL)
    return self.o_proj(causal_attend(q, head_major(k), head_major(v)))

  def forward_cached(
    self,
    x_BxCxD: jax.Array,
    positions_BxC: jax.Array,
    write_BxC: jax.Array,
    k_blocks: Sequence[jax.Array],
    v_blocks: Sequence[jax.Array],
    span: int | None = None,
  ) -> tuple[jax.Array, tuple[jax.Array, ...], tuple[jax.Array, ...]]:
    """Writes new keys/values at their positions, then attends the cache.

    `k_blocks`, `v_blocks`: one layer's cache blocks (see `KVCache`). With
    `span` (static), only the blocks that start below it are written and
    read: the caller promises every position it writes or queries is below
    it. Decode cost then follows the longest live row, not the cache size.
    """
    q, k, v = self.project(x_BxCxD, positions_BxC)
    k_new_BxKxCxDh = head_major(k)
    v_new_BxKxCxDh = head_major(v)
    rows_Bx1x1 = jnp.arange(x_BxCxD.shape[0])[:, None, None]
    heads_1xKx1 = jnp.arange(k.shape[2])[None, :, None]
    max_len = sum(block.shape[2] for block in v_blocks)
    span = max_len if span is None else min(span, max_len)
    k_blocks, v_blocks = list(k_blocks), list(v_blocks)
    start, read = 0, 0
    for j, v_block in enumerate(v_blocks):
      n = v_block.shape[2]
      if start >= span:  # beyond the span: neither written nor read
        break
      # Tokens that are not written, or belong to another block, go to
      # index n, which `mode="drop"` discards: no write lands elsewhere.
      local_BxC = positions_BxC - start
      inside_BxC = write_BxC & (local_BxC >= 0) & (local_BxC < n)
      pos_Bx1xC = jnp.where(inside_BxC, local_BxC, n)[:, None, :]
      # Keys are stored transposed (SxKxDhxB): the indexed dims (row,
      # head, position) come first in the update, then Dh, as for values.
      k_block = (
        k_blocks[j]
        .at[rows_Bx1x1, heads_1xKx1, :, pos_Bx1xC]
        .set(k_new_BxKxCxDh.astype(k_blocks[j].dtype), mode="drop")
      )
      v_block = v_block.at[rows_Bx1x1, heads_1xKx1, pos_Bx1xC].set(
        v_new_BxKxCxDh.astype(v_block.dtype), mode="drop"
      )
      k_blocks[j] = shd.constrain(k_block, K_CACHE_AXES)
      v_blocks[j] = shd.constrain(v_block, V_CACHE_AXES)
      start += n
      read = j + 1
    # Every position <= the query's own has been written (earlier turns or
    # this chunk); later entries may be stale and are masked out.
    out = self.o_proj(
      attend_cache(q, k_blocks[:read], v_blocks[:read], positions_BxC)
    )
    k_cache, v_cache = tuple(k_blocks), tuple(v_blocks)
    return out, k_cache, v_cache


class MLP(nnx.Module):
  """SwiGLU: down(silu(gate(x)) * up(x))."""

  def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
    d, f = config.d_model, config.mlp_dim
    self.gate_proj = Dense(
      (d,), (f,), (shd.EMBED, shd.MLP),
      use_bias=False, config=config, rngs=rngs,
    )  # fmt: skip
    self.up_proj = Dense(
      (d,), (f,), (shd.EMBED, shd.MLP),
      use_bias=False, config=config, rngs=rngs,
    )  # fmt: skip
    self.down_proj = Dense(
      (f,), (d,), (shd.MLP, shd.EMBED),
      use_bias=False, config=config, rngs=rngs,
    )  # fmt: skip

  def __call__(self, x_BxLxD: jax.Array) -> jax.Array:
    h_BxLxF = jax.nn.silu(self.gate_proj(x_BxLxD)) * self.up_proj(x_BxLxD)
    h_BxLxF = shd.constrain(h_BxLxF, (shd.BATCH, shd.LENGTH, shd.MLP))
    return self.down_proj(h_BxLxF)


class Block(nnx.Module):
  """Pre-norm residual block: attention then MLP."""

  def __init__(self, config: ModelConfig, rngs: nnx.Rngs):
    self.attn_norm = RMSNorm(config.d_model, shd.EMBED, config)
    self.attn = Attention(config, rngs)
    self.mlp_norm = RMSNorm(config.d_model, shd.EMBED, config)
    self.mlp = MLP(config, rngs)

  def __call__(self, x_BxLxD: jax.Array, positions_BxL: jax.Array):
    x_BxLxD = x_BxLxD + self.attn(self.attn_norm(x_BxLxD), positions_BxL)
    x_BxLxD = x_BxLxD + self.mlp(self.mlp_norm(x_BxLxD))
    return shd.constrain(x_BxLxD, (shd.BATCH, shd.LENGTH, shd.EMBED))

  def forward_cached(
    self, x_BxCxD, positions_BxC, write_BxC, k_cache, v_cache, span=None
  ):
    attn_out, k_cache, v_cache = self.attn.forward_cached(
      self.attn_norm(x_BxCxD),
      positions_BxC,
      write_BxC,
      k_cache,
      v_cache,
      span,
    )
    x_BxCxD = x_BxCxD + attn_out
    x_BxCxD = x_BxCxD + self.mlp(self.mlp_norm(x_BxCxD))
    x_BxCxD = shd.constrain(x_BxCxD, (shd.BATCH, shd.LENGTH, shd.EMBED))
    return x_BxCxD, k_cache, v_cache


class Transformer(nnx.Module):
  """The decoder. See the module docstring for the parameter layout."""

  def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
    self.config = config
    # std 1/sqrt(D) keeps tied logits O(1) at init, so a random model
    # samples diverse tokens rather than a near one-hot distribution.
    self.embed = nnx.Embed(
      config.vocab_size,
      config.d_model,
      dtype=config.compute_dtype,
      param_dtype=config.weight_dtype,
      embedding_init=nnx.with_metadata(
        nnx.initializers.normal(1.0 / math.sqrt(config.d_model)),
        out_sharding=(shd.VOCAB, shd.EMBED),
        eager_sharding=False,
      ),
      rngs=rngs,
    )
    self.layers = nnx.List(
      [Block(config, rngs) for _ in range(config.n_layers)]
    )
    self.final_norm = RMSNorm(config.d_model, shd.EMBED, config)
    if config.tie_embeddings:
      self.lm_head = None
    else:
      self.lm_head = Dense(
        (config.d_model,), (config.vocab_size,), (shd.EMBED, shd.VOCAB),
        use_bias=False, config=config, rngs=rngs,
      )  # fmt: skip

  def embed_tokens(self, tokens_BxL: jax.Array) -> jax.Array:
    x_BxLxD = self.embed(tokens_BxL).astype(self.config.compute_dtype)
    return shd.constrain(x_BxLxD, (shd.BATCH, shd.LENGTH, shd.EMBED))

  def unembed(self, hidden_BxLxD: jax.Array) -> jax.Array:
    """Final norm and vocabulary projection; float32 logits."""
    return self.vocab_projection()(self.final_norm(hidden_BxLxD))

  def vocab_projection(self) -> Callable[[jax.Array], jax.Array]:
    """Normed hidden states [..., D] -> float32 logits [..., V], as a pure
    function closing over the (tied or untied) weight array."""
    if self.lm_head is None:
      weight, pattern = self.embed.embedding[...], "...d,vd->...v"  # [V, D]
    elif self.lm_head.out_first:  # `with_kernels_out_first`: [V, D]
      weight, pattern = self.lm_head.kernel[...], "...d,vd->...v"
    else:
      weight, pattern = self.lm_head.kernel[...], "...d,dv->...v"  # [D, V]

    def project(h: jax.Array) -> jax.Array:
      logits = jnp.einsum(pattern, h, weight.astype(h.dtype),
                          preferred_element_type=_F32)  # fmt: skip
      axes = (shd.BATCH, shd.LENGTH, shd.VOCAB)[-logits.ndim :]
      return shd.constrain(logits.astype(_F32), axes)

    return project

  def token_logp(
    self,
    tokens_BxL: jax.Array,
    positions_BxL: jax.Array | None = None,
    *,
    with_entropy: bool = False,
    temperature: float = 1.0,
  ) -> tuple[jax.Array, jax.Array | None]:
    """(logp_BxL, entropy_BxL or None) of the teacher-forced sequences,
    aligned as `losses.token_logp`: the training losses' forward pass.

    Both are of the distribution softmax(logits / `temperature`), the one a
    sampler at that temperature draws from. With `config.logits_chunk` > 0
    (and shorter than L) the vocabulary projection runs in chunks of
    positions (`losses.chunked_token_logp`), so the [B, L, V] logits never
    exist at once.
    """
    hidden_BxLxD = self.hidden(tokens_BxL, positions_BxL)
    project = self.vocab_projection()
    if temperature != 1.0:
      project = functools.partial(_tempered, project, temperature)
    chunk = self.config.logits_chunk
    if 0 < chunk < tokens_BxL.shape[1]:
      return losses.chunked_token_logp(
        self.final_norm(hidden_BxLxD),
        tokens_BxL,
        project,
        chunk,
        with_entropy,
      )
    logits_BxLxV = project(self.final_norm(hidden_BxLxD))
    if with_entropy:
      return losses.token_logp_and_entropy(logits_BxLxV, tokens_BxL)
    return losses.token_logp(logits_BxLxV, tokens_BxL), None

  def hidden(
    self, tokens_BxL: jax.Array, positions_BxL: jax.Array | None = None
  ) -> jax.Array:
    """Residual stream after the last block (before the final norm)."""
    if positions_BxL is None:
      positions_BxL = default_positions(tokens_BxL)
    x_BxLxD = self.embed_tokens(tokens_BxL)
    if self.config.remat != "none":
      return scan_blocks(self.layers, x_BxLxD, positions_BxL, self.config.remat)
    for layer in self.layers:
      x_BxLxD = layer(x_BxLxD, positions_BxL)
    return x_BxLxD

  def __call__(
    self, tokens_BxL: jax.Array, positions_BxL: jax.Array | None = None
  ) -> jax.Array:
    """Teacher-forced forward pass: logits_BxLxV (float32)."""
    return self.unembed(self.hidden(tokens_BxL, positions_BxL))

  def forward_cached(
    self,
    tokens_BxC: jax.Array,
    positions_BxC: jax.Array,
    write_BxC: jax.Array,
    cache: KVCache,
    span: int | None = None,
  ) -> tuple[jax.Array, KVCache]:
    """Appends a chunk to the cache; returns its hidden states and the cache.

    Row b's token c is written at `positions_BxC[b, c]` iff
    `write_BxC[b, c]`; unwritten tokens still produce (ignored) outputs.
    `span` (static int) limits attention to cache positions < span; every
    query that matters must sit below it.
    """
    x_BxCxD = self.embed_tokens(tokens_BxC)
    new_k, new_v = [], []
    for layer, k_cache, v_cache in zip(
      self.layers, cache.k, cache.v, strict=True
    ):
      x_BxCxD, k_cache, v_cache = layer.forward_cached(
        x_BxCxD, positions_BxC, write_BxC, k_cache, v_cache, span
      )
      new_k.append(k_cache)
      new_v.append(v_cache)
    return x_BxCxD, KVCache(k=tuple(new_k), v=tuple(new_v))


def scan_blocks(
  layers: Sequence[Block],
  x_BxLxD: jax.Array,
  positions_BxL: jax.Array,
  remat: str,
) -> jax.Array:
  """The blocks as one `lax.scan` whose body is under `jax.checkpoint`.

  The backward pass recomputes each block from its input ("full") or
  from its saved weight-matmul outputs ("dots", `jax.checkpoint_policies.
  dots_with_no_batch_dims_saveable`), so activation memory holds one
  block's internals at a time instead of every block's. The scan is what
  makes that real on XLA:CPU: with `jax.checkpoint` around each block of
  the unrolled chain, the compiled gradient's temporary memory barely
  moved (tiny preset, 8 x 512 tokens: 473 -> 451 MiB), while scanned it
  fell to 146 MiB ("full") and 182 MiB ("dots"); `bench.py remat`
  measures the RL update.

  The layers' parameters are stacked for the scan inside the traced
  function (one copy of the block weights per call; their gradients flow
  back through the stack), so the module keeps its per-layer parameter
  tree: Hugging Face tables, sharding rules and checkpoints are the same
  with and without remat. Every block must share one graph (they do: one
  config builds them all).
  """
  graphdef, _ = nnx.split(layers[0])
  states = [nnx.state(layer) for layer in layers]
  # Kept split as the parameters are (FSDP). Without the constraints XLA
  # may gather the stack, and the gradients the backward scan accumulates
  # into it, whole on every device (it did for a small model on 8 devices).
  stacked = shd.constrain_state(
    jax.tree.map(lambda *xs: jnp.stack(xs), *states), leading=1
  )
  policy = (
    jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    if remat == "dots"
    else None
  )

  @functools.partial(jax.checkpoint, policy=policy)
  def body(x_BxLxD, state):
    state = shd.constrain_state(state)
    return nnx.merge(graphdef, state)(x_BxLxD, positions_BxL), None

  return jax.lax.scan(body, x_BxLxD, stacked)[0]


def with_kernels_out_first(model: Transformer) -> Transformer:
  """A copy of `model` whose Dense kernels are stored out-dims first.

  Each kernel in_shape + out_shape becomes out_shape + in_shape (a new
  array; the logical axes are permuted alike, so sharding rules still
  apply) and its `Dense` contracts the kernel's trailing dims. Outputs are
  the same; only the memory layout the products read changes. On a 2-core
  Zen 3 VM the sampler's decode step ran 9-16% faster this way (XLA:CPU's
  small-row products read the weights faster) and the prefill about the
  same: a batch-32 turn 1.09-1.14x, the multi-turn cache path 0.97-1.05x;
  on an Intel VM both were slower, 0.91x and 0.85x (experiments/
  benchmarks, sixteenth and seventeenth sessions). `Sampler(...,
  kernels_out_first=True)` uses it. `model` itself is not changed.
  """
  graphdef, state = nnx.split(model)
  copy = nnx.merge(graphdef, state)  # new modules, the same arrays
  for _, module in nnx.iter_graph(copy):
    if not isinstance(module, Dense) or module.out_first:
      continue
    kernel = module.kernel
    order = (*range(module.n_in, kernel.ndim), *range(module.n_in))
    metadata = kernel.get_metadata()
    axes = metadata.get("out_sharding")
    module.kernel = nnx.Param(
      jnp.transpose(kernel[...], order),
      out_sharding=None if axes is None else tuple(axes[i] for i in order),
      eager_sharding=metadata.get("eager_sharding", False),
    )
    module.out_first = True
  return copy


def _tempered(project, temperature: float, h: jax.Array) -> jax.Array:
  return project(h) / temperature


def default_positions(tokens_BxL: jax.Array) -> jax.Array:
  b, l = tokens_BxL.shape
  return jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
